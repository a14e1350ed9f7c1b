"""The reasoning look-alikes: synth-logiqa (deduction, weakening, assumptions, orderings), synth-piqa (physical
goals and two solutions), synth-socialiqa (what a person did and what follows)."""

from __future__ import annotations

from locus_model.data.synthetic_text._common import letters, pick, sample

_LOGIC_GROUPS = [
    "painters",
    "lawyers",
    "engineers",
    "chess players",
    "farmers",
    "violinists",
    "poets",
    "sailors",
    "botanists",
    "athletes",
    "librarians",
    "architects",
    "pilots",
    "judges",
]


_LOGIC_CITIES = ["Riverton", "Eastvale", "Northport", "Lakeshire", "Hillcrest", "Marlow", "Dunmore", "Ashford"]


_LOGIC_POLICY = [
    "a new bicycle lane",
    "a ban on plastic bags",
    "free evening classes",
    "a four-day work week",
    "a tax on sugary drinks",
    "longer library hours",
    "a curfew for teenagers",
    "a tree-planting scheme",
]


_LOGIC_OUTCOME = [
    "traffic accidents fell",
    "household spending rose",
    "exam results improved",
    "crime declined",
    "hospital visits dropped",
    "tourism increased",
    "air quality improved",
    "volunteering doubled",
]


def logiqa(rng, sub):
    if sub == "deduction":
        a, b, c = sample(rng, _LOGIC_GROUPS, 3)
        p = pick(rng, ["All", "No", "Every one of the"])
        return (
            f"{p} {a} in the club are {b}. Some {c} are {a}. Anyone who is one of the {b} attends the "
            f"Thursday meeting. If the above statements are true, which of the following must also be true?\n"
            + letters(
                [
                    f"Some {c} attend the Thursday meeting.",
                    f"All {b} are {a}.",
                    f"No {c} are {b}.",
                    f"Some {a} are not {c}.",
                ]
            )
        )
    if sub == "weaken":
        city, pol, out = pick(rng, _LOGIC_CITIES), pick(rng, _LOGIC_POLICY), pick(rng, _LOGIC_OUTCOME)
        yrs = int(rng.integers(2, 9))
        return (
            f"In the {yrs} years after {city} introduced {pol}, {out}. The council therefore argues that "
            f"{pol} caused the change. Which of the following, if true, most seriously weakens the argument?\n"
            + letters(
                [
                    f"Neighbouring towns without {pol} saw the same trend.",
                    "The council was re-elected.",
                    f"{city} is larger than most towns.",
                    "Some residents opposed the plan.",
                ]
            )
        )
    if sub == "assumption":
        g, city, out = pick(rng, _LOGIC_GROUPS), pick(rng, _LOGIC_CITIES), pick(rng, _LOGIC_OUTCOME)
        return (
            f"A survey of {g} in {city} found that those who read daily report fewer errors at work. The "
            f"author concludes that reading daily reduces errors. The argument depends on which assumption? "
            f"(context: after the survey, {out})\n"
            + letters(
                [
                    "Error reports are accurate.",
                    f"All {g} read daily.",
                    "Reading is enjoyable.",
                    f"{city} has many libraries.",
                ]
            )
        )
    people = sample(rng, ["F", "G", "H", "J", "K", "L", "M", "N", "P", "R"], 5)
    slots = pick(rng, ["offices", "parking spaces", "seats in a row", "time slots", "stalls"])
    return (
        f"Five colleagues, {', '.join(people)}, are assigned to five {slots} numbered 1 to 5. {people[0]} is "
        f"next to {people[2]}. {people[1]} is not in slot {int(rng.integers(1, 6))}. {people[3]} comes before "
        f"{people[4]}. Which of the following could be true?\n"
        f"{letters([f'{p} is in slot {int(rng.integers(1, 6))}.' for p in sample(rng, people, 4)])}"
    )


_PIQA = {
    "kitchen": (
        [
            "soften hard butter",
            "keep bread fresh",
            "peel garlic quickly",
            "stop a pot boiling over",
            "clean a cast iron pan",
            "ripen an avocado",
            "chop onions without tears",
            "reheat pizza crisply",
        ],
        [
            "grate it into a bowl",
            "put it in a paper bag",
            "shake it in a closed jar",
            "lay a wooden spoon across it",
            "scrub it with coarse salt",
            "place it near a banana",
            "chill it before cutting",
            "warm it in a skillet",
        ],
        ["spoon", "bowl", "skillet", "oven", "fridge", "jar", "knife", "towel"],
    ),
    "household": (
        [
            "remove a stripped screw",
            "unclog a drain",
            "fix a squeaky door hinge",
            "dust ceiling fan blades",
            "remove a sticker residue",
            "hang a picture straight",
            "clean a microwave",
            "dry wet shoes",
        ],
        [
            "press a rubber band into the head",
            "pour baking soda and vinegar in",
            "rub bar soap on the pin",
            "slide an old pillowcase over each blade",
            "dab it with cooking oil",
            "mark the wall with painter's tape",
            "steam a bowl of lemon water inside",
            "stuff them with newspaper",
        ],
        ["screwdriver", "pillowcase", "hammer", "vacuum", "broom", "sponge", "newspaper", "ladder"],
    ),
    "outdoors": (
        [
            "start a campfire in damp weather",
            "keep mosquitoes away",
            "find north without a compass",
            "keep a tent dry",
            "carry water on a hike",
            "cool a drink at a river",
            "dry wet firewood",
            "warm cold hands",
        ],
        [
            "use birch bark as tinder",
            "burn sage in the fire",
            "watch where the sun rises",
            "put a tarp under the floor",
            "fill a hydration bladder",
            "set the bottle in a shaded pool",
            "split the logs to expose dry wood",
            "tuck them under your armpits",
        ],
        ["tarp", "stick", "rope", "rock", "bottle", "backpack", "lantern", "boots"],
    ),
    "crafts": (
        [
            "cut felt cleanly",
            "thread a needle",
            "glue glitter to paper",
            "paint a straight line",
            "stop yarn from tangling",
            "fold paper neatly",
            "sand a small wooden toy",
            "store paint brushes",
        ],
        [
            "use sharp fabric scissors",
            "wet the end of the thread",
            "spread a thin layer of craft glue first",
            "mask the edge with tape",
            "keep the ball in a bowl",
            "score the fold with a ruler",
            "wrap sandpaper around a pencil",
            "hang them bristles down",
        ],
        ["scissors", "thread", "glue", "tape", "yarn", "ruler", "pencil", "brush"],
    ),
}


def piqa(rng, sub):
    goals, good, things = _PIQA[sub]
    i = int(rng.integers(len(goals)))
    verb = pick(rng, ["rub", "soak", "freeze", "bury", "shake", "wrap", "boil", "paint"])
    wrong = f"{verb} it with a {pick(rng, things)}"
    right = f"{good[i]} and then use a {pick(rng, things)}"
    sols = [right, wrong] if rng.random() < 0.5 else [wrong, right]
    return f"Goal: how to {goals[i]}?\nSolution 1: {sols[0]}.\nSolution 2: {sols[1]}."


_SOCIAL = [
    "Jordan",
    "Casey",
    "Riley",
    "Taylor",
    "Alex",
    "Morgan",
    "Jesse",
    "Cameron",
    "Skylar",
    "Avery",
    "Quinn",
    "Robin",
    "Kendall",
    "Sydney",
]


_SOCIAL_ACTS = [
    "forgot a friend's birthday party",
    "helped a neighbour carry groceries",
    "lent their notes to a classmate",
    "spilled coffee on a coworker's laptop",
    "won the spelling bee",
    "stayed late to finish the group project",
    "cancelled plans at the last minute",
    "surprised their parents with dinner",
    "apologised to their sister",
    "gave up their seat on the bus",
    "told a joke at the meeting",
    "returned a lost wallet",
    "ignored a message from their cousin",
    "threw a party for their roommate",
]


def socialiqa(rng, sub):
    who, other = sample(rng, _SOCIAL, 2)
    act = pick(rng, _SOCIAL_ACTS)
    ctx = f"{who} {act}{pick(rng, ['', ' yesterday', ' last weekend', ' this morning', ' after school', ' at work'])}."
    if sub == "emotions":
        q = pick(
            rng,
            [
                f"How would {other} feel as a result?",
                f"How would you describe {who}?",
                "How would others feel as a result?",
            ],
        )
        opts = sample(rng, ["grateful", "annoyed", "proud", "embarrassed", "relieved", "hurt", "happy", "guilty"], 3)
    elif sub == "intentions":
        q = pick(rng, [f"Why did {who} do this?", f"What did {who} need to do before this?"])
        opts = sample(
            rng,
            [
                "to be kind",
                "to make amends",
                "to impress others",
                "to avoid trouble",
                "to feel useful",
                "to keep a promise",
            ],
            3,
        )
    else:
        q = pick(
            rng,
            [f"What will {who} want to do next?", f"What will {other} want to do next?", "What will happen to others?"],
        )
        opts = sample(
            rng,
            [
                "say thank you",
                "ask for an explanation",
                "celebrate together",
                "change the subject",
                "offer to help",
                "go home early",
            ],
            3,
        )
    return f"{ctx} {q}\n{letters(opts)}"
