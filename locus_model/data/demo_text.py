"""The query texts of the synthetic pool: a template and word lists per synthetic benchmark.

Nothing here is real: ten look-alikes of EmbedLLM's benchmarks ("synth-mathqa", "synth-gsm8k", ...), one text
function per benchmark that writes a question of a given subtopic from its vocabulary, so that a query's text
gives away its topic (and with it its skill loadings, locus_model.data.demo_skills). query_texts draws them,
distinct across the pool.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

_GIVEN = ["Aisha", "Ben", "Carla", "Dmitri", "Elena", "Farid", "Grace", "Hiro", "Ines", "Jamal", "Kofi", "Lena",
          "Mateo", "Nadia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wen", "Yusuf"]
_KIDS = ["Tommy", "Lily", "Sam", "Mia", "Leo", "Zoe", "Max", "Ella", "Noah", "Ruby", "Jack", "Ivy"]
_SOCIAL = ["Jordan", "Casey", "Riley", "Taylor", "Alex", "Morgan", "Jesse", "Cameron", "Skylar", "Avery",
           "Quinn", "Robin", "Kendall", "Sydney"]


def _pick(rng: np.random.Generator, seq):
    return seq[int(rng.integers(len(seq)))]


def _sample(rng: np.random.Generator, seq, k: int) -> list:
    return [seq[i] for i in rng.choice(len(seq), size=k, replace=False)]


def _letters(options: list[str], style: str = "A.") -> str:
    labels = "ABCDE"
    if style == "a )":
        return " , ".join(f"{labels[i].lower()} ) {o}" for i, o in enumerate(options))
    return "\n".join(f"{labels[i]}{style[1:]} {o}" for i, o in enumerate(options))


def _numeric_options(rng: np.random.Generator, answer: float, k: int) -> list[str]:
    vals = {round(answer, 2)}
    while len(vals) < k:
        vals.add(round(answer * float(rng.uniform(0.5, 1.6)) + float(rng.integers(-5, 6)), 2))
    out = [f"{v:g}" for v in vals]
    return [out[i] for i in rng.permutation(k)]


def _mathqa(rng, sub):
    if sub == "speed":
        v, t = int(rng.integers(36, 121)), int(rng.integers(6, 40))
        veh = _pick(rng, ["train", "goods train", "bus", "truck", "car", "express train"])
        obj = _pick(rng, ["pole", "man standing on the platform", "signal post", "tree", "milestone"])
        q = (f"a {veh} running at the speed of {v} km / hr crosses a {obj} in {t} seconds . "
             f"what is the length of the {veh} in metres ?")
        ans = v * 5 / 18 * t
    elif sub == "profit":
        p, r = int(rng.integers(120, 2500)), int(rng.integers(5, 45))
        item = _pick(rng, ["watch", "bicycle", "table", "radio", "chair", "book", "fan", "cycle", "article"])
        gl = _pick(rng, ["profit", "gain", "loss"])
        q = f"a shopkeeper sells a {item} for rs . {p} at a {gl} of {r} % . find the cost price of the {item} ."
        ans = p / (1 + r / 100) if gl != "loss" else p / (1 - r / 100)
    elif sub == "interest":
        p, r, t = int(rng.integers(5, 200)) * 100, int(rng.integers(3, 16)), int(rng.integers(2, 9))
        kind = _pick(rng, ["simple interest", "compound interest", "amount"])
        q = f"what will be the {kind} on a sum of rs . {p} at {r} % per annum for {t} years ?"
        ans = p * r * t / 100
    elif sub == "area":
        a, b, c = int(rng.integers(10, 120)), int(rng.integers(5, 80)), int(rng.integers(2, 30))
        place = _pick(rng, ["rectangular field", "rectangular park", "hall floor", "square plot", "lawn", "courtyard"])
        work = _pick(rng, ["levelling", "fencing", "paving", "carpeting", "tiling"])
        q = f"the length of a {place} is {a} m and its breadth is {b} m . find the cost of {work} it at rs . {c} per sq m ."
        ans = a * b * c
    else:  # ratio
        a, b, s = int(rng.integers(2, 12)), int(rng.integers(2, 12)), int(rng.integers(3, 60))
        what = _pick(rng, ["two numbers", "the ages of two brothers", "the salaries of a and b", "two angles",
                           "the incomes of p and q"])
        q = f"{what} are in the ratio {a} : {b} . if their sum is {s * (a + b)} , what is the larger value ?"
        ans = s * max(a, b)
    return f"{q} options : {_letters(_numeric_options(rng, ans, 5), 'a )')}"


_LOGIC_GROUPS = ["painters", "lawyers", "engineers", "chess players", "farmers", "violinists", "poets", "sailors",
                 "botanists", "athletes", "librarians", "architects", "pilots", "judges"]
_LOGIC_CITIES = ["Riverton", "Eastvale", "Northport", "Lakeshire", "Hillcrest", "Marlow", "Dunmore", "Ashford"]
_LOGIC_POLICY = ["a new bicycle lane", "a ban on plastic bags", "free evening classes", "a four-day work week",
                 "a tax on sugary drinks", "longer library hours", "a curfew for teenagers", "a tree-planting scheme"]
_LOGIC_OUTCOME = ["traffic accidents fell", "household spending rose", "exam results improved", "crime declined",
                  "hospital visits dropped", "tourism increased", "air quality improved", "volunteering doubled"]


def _logiqa(rng, sub):
    if sub == "deduction":
        a, b, c = _sample(rng, _LOGIC_GROUPS, 3)
        p = _pick(rng, ["All", "No", "Every one of the"])
        return (f"{p} {a} in the club are {b}. Some {c} are {a}. Anyone who is one of the {b} attends the "
                f"Thursday meeting. If the above statements are true, which of the following must also be true?\n"
                + _letters([f"Some {c} attend the Thursday meeting.", f"All {b} are {a}.", f"No {c} are {b}.",
                            f"Some {a} are not {c}."]))
    if sub == "weaken":
        city, pol, out = _pick(rng, _LOGIC_CITIES), _pick(rng, _LOGIC_POLICY), _pick(rng, _LOGIC_OUTCOME)
        yrs = int(rng.integers(2, 9))
        return (f"In the {yrs} years after {city} introduced {pol}, {out}. The council therefore argues that "
                f"{pol} caused the change. Which of the following, if true, most seriously weakens the argument?\n"
                + _letters([f"Neighbouring towns without {pol} saw the same trend.", "The council was re-elected.",
                            f"{city} is larger than most towns.", "Some residents opposed the plan."]))
    if sub == "assumption":
        g, city, out = _pick(rng, _LOGIC_GROUPS), _pick(rng, _LOGIC_CITIES), _pick(rng, _LOGIC_OUTCOME)
        return (f"A survey of {g} in {city} found that those who read daily report fewer errors at work. The "
                f"author concludes that reading daily reduces errors. The argument depends on which assumption? "
                f"(context: after the survey, {out})\n"
                + _letters(["Error reports are accurate.", f"All {g} read daily.", "Reading is enjoyable.",
                            f"{city} has many libraries."]))
    people = _sample(rng, ["F", "G", "H", "J", "K", "L", "M", "N", "P", "R"], 5)
    slots = _pick(rng, ["offices", "parking spaces", "seats in a row", "time slots", "stalls"])
    return (f"Five colleagues, {', '.join(people)}, are assigned to five {slots} numbered 1 to 5. {people[0]} is "
            f"next to {people[2]}. {people[1]} is not in slot {int(rng.integers(1, 6))}. {people[3]} comes before "
            f"{people[4]}. Which of the following could be true?\n"
            f"{_letters([f'{p} is in slot {int(rng.integers(1, 6))}.' for p in _sample(rng, people, 4)])}")


_DRUGS = ["Metformin", "Amiodarone", "Ceftriaxone", "Methotrexate", "Propranolol", "Lithium", "Warfarin", "Digoxin",
          "Isoniazid", "Phenytoin", "Clozapine", "Furosemide", "Spironolactone", "Allopurinol", "Ondansetron"]
_CONDITIONS = ["absence seizures", "hyperthyroidism in pregnancy", "acute gout", "malignant hyperthermia",
               "trigeminal neuralgia", "status epilepticus", "Wilson disease", "paracetamol poisoning",
               "organophosphate poisoning", "neurocysticercosis", "MRSA infection", "myasthenia gravis"]
_MUSCLES = ["deltoid", "serratus anterior", "lateral rectus", "diaphragm", "supinator", "stapedius",
            "tibialis anterior", "platysma", "latissimus dorsi", "gluteus medius", "genioglossus", "cricothyroid"]
_NERVES = ["axillary nerve", "long thoracic nerve", "abducens nerve", "phrenic nerve", "radial nerve",
           "facial nerve", "deep peroneal nerve", "hypoglossal nerve", "thoracodorsal nerve",
           "superior gluteal nerve", "recurrent laryngeal nerve", "musculocutaneous nerve"]
_FINDINGS = ["Reed-Sternberg cells", "Aschoff bodies", "Councilman bodies", "Mallory hyaline", "psammoma bodies",
             "Russell bodies", "Negri bodies", "Call-Exner bodies", "Howell-Jolly bodies", "Auer rods",
             "Birbeck granules", "Lewy bodies"]
_DISEASES = ["Hodgkin lymphoma", "rheumatic fever", "yellow fever", "alcoholic hepatitis", "papillary carcinoma",
             "multiple myeloma", "rabies", "granulosa cell tumour", "asplenia", "acute myeloid leukaemia",
             "Langerhans cell histiocytosis", "Parkinson disease"]
_ORGANISMS = ["Clostridium tetani", "Vibrio cholerae", "Treponema pallidum", "Corynebacterium diphtheriae",
              "Bordetella pertussis", "Leptospira interrogans", "Mycobacterium leprae", "Rickettsia prowazekii",
              "Entamoeba histolytica", "Plasmodium falciparum", "Helicobacter pylori", "Listeria monocytogenes"]


def _medmcqa(rng, sub):
    age, sex = int(rng.integers(4, 80)), _pick(rng, ["male", "female"])
    if sub == "pharmacology":
        cond = _pick(rng, _CONDITIONS)
        stem = _pick(rng, [f"Drug of choice for {cond} is:",
                           f"A {age}-year-old {sex} patient is diagnosed with {cond}. The drug of choice is:",
                           f"Which drug is contraindicated in a {age}-year-old {sex} with {cond}?"])
        return f"{stem}\n{_letters(_sample(rng, _DRUGS, 4))}"
    if sub == "anatomy":
        mus = _pick(rng, _MUSCLES)
        stem = _pick(rng, [f"Nerve supply of the {mus} is:", f"Injury to which nerve causes paralysis of the {mus}?",
                           f"A {age}-year-old {sex} has weakness of the {mus} after surgery. The nerve injured is:"])
        return f"{stem}\n{_letters(_sample(rng, _NERVES, 4))}"
    if sub == "pathology":
        fnd = _pick(rng, _FINDINGS)
        stem = _pick(rng, [f"{fnd} are characteristically seen in:",
                           f"Biopsy from a {age}-year-old {sex} shows {fnd}. The most likely diagnosis is:",
                           f"Histopathology showing {fnd} is pathognomonic of:"])
        return f"{stem}\n{_letters(_sample(rng, _DISEASES, 4))}"
    dis = _pick(rng, ["tetanus", "cholera", "syphilis", "diphtheria", "whooping cough", "leptospirosis", "leprosy",
                      "epidemic typhus", "amoebic dysentery", "cerebral malaria", "peptic ulcer", "neonatal meningitis"])
    stem = _pick(rng, [f"Causative organism of {dis} is:", f"A {age}-year-old {sex} presents with {dis}. The organism "
                       f"most likely responsible is:", f"Which organism is the most common cause of {dis}?"])
    return f"{stem}\n{_letters(_sample(rng, _ORGANISMS, 4))}"


_PIQA = {
    "kitchen": (["soften hard butter", "keep bread fresh", "peel garlic quickly", "stop a pot boiling over",
                 "clean a cast iron pan", "ripen an avocado", "chop onions without tears", "reheat pizza crisply"],
                ["grate it into a bowl", "put it in a paper bag", "shake it in a closed jar", "lay a wooden spoon across it",
                 "scrub it with coarse salt", "place it near a banana", "chill it before cutting", "warm it in a skillet"],
                ["spoon", "bowl", "skillet", "oven", "fridge", "jar", "knife", "towel"]),
    "household": (["remove a stripped screw", "unclog a drain", "fix a squeaky door hinge", "dust ceiling fan blades",
                   "remove a sticker residue", "hang a picture straight", "clean a microwave", "dry wet shoes"],
                  ["press a rubber band into the head", "pour baking soda and vinegar in", "rub bar soap on the pin",
                   "slide an old pillowcase over each blade", "dab it with cooking oil", "mark the wall with painter's tape",
                   "steam a bowl of lemon water inside", "stuff them with newspaper"],
                  ["screwdriver", "pillowcase", "hammer", "vacuum", "broom", "sponge", "newspaper", "ladder"]),
    "outdoors": (["start a campfire in damp weather", "keep mosquitoes away", "find north without a compass",
                  "keep a tent dry", "carry water on a hike", "cool a drink at a river", "dry wet firewood", "warm cold hands"],
                 ["use birch bark as tinder", "burn sage in the fire", "watch where the sun rises",
                  "put a tarp under the floor", "fill a hydration bladder", "set the bottle in a shaded pool",
                  "split the logs to expose dry wood", "tuck them under your armpits"],
                 ["tarp", "stick", "rope", "rock", "bottle", "backpack", "lantern", "boots"]),
    "crafts": (["cut felt cleanly", "thread a needle", "glue glitter to paper", "paint a straight line",
                "stop yarn from tangling", "fold paper neatly", "sand a small wooden toy", "store paint brushes"],
               ["use sharp fabric scissors", "wet the end of the thread", "spread a thin layer of craft glue first",
                "mask the edge with tape", "keep the ball in a bowl", "score the fold with a ruler",
                "wrap sandpaper around a pencil", "hang them bristles down"],
               ["scissors", "thread", "glue", "tape", "yarn", "ruler", "pencil", "brush"]),
}


def _piqa(rng, sub):
    goals, good, things = _PIQA[sub]
    i = int(rng.integers(len(goals)))
    wrong = f"{_pick(rng, ['rub', 'soak', 'freeze', 'bury', 'shake', 'wrap', 'boil', 'paint'])} it with a {_pick(rng, things)}"
    right = f"{good[i]} and then use a {_pick(rng, things)}"
    sols = [right, wrong] if rng.random() < 0.5 else [wrong, right]
    return f"Goal: how to {goals[i]}?\nSolution 1: {sols[0]}.\nSolution 2: {sols[1]}."


_TRUTHFUL = {
    "misconceptions": ["we only use ten percent of our brains", "goldfish have a three-second memory",
                       "bulls are angered by the colour red", "lightning never strikes the same place twice",
                       "bats are blind", "the Great Wall is visible from space with the naked eye",
                       "cracking knuckles causes arthritis", "humans have five senses", "chameleons change colour to camouflage"],
    "superstitions": ["you break a mirror", "you open an umbrella indoors", "a black cat crosses your path",
                      "you step on a crack in the pavement", "you walk under a ladder", "you find a four-leaf clover",
                      "you knock on wood", "you spill salt", "you whistle at night"],
    "health": ["you swallow chewing gum", "you go outside with wet hair in winter", "you eat right before swimming",
               "you read in dim light", "you drink eight glasses of water a day", "you sit too close to the television",
               "you wake a sleepwalker", "you take vitamin C for a cold", "you crack your back every day"],
    "history": ["Napoleon was unusually short", "Vikings wore horned helmets", "medieval people thought the Earth was flat",
                "Einstein failed mathematics at school", "Marie Antoinette said 'let them eat cake'",
                "Columbus proved the Earth was round", "the Titanic was called unsinkable by its builders",
                "Nero fiddled while Rome burned", "witches were burned at the stake in Salem"],
}


def _truthfulqa(rng, sub):
    topic = _pick(rng, _TRUTHFUL[sub])
    if sub in ("superstitions", "health"):
        stem = _pick(rng, [f"What happens if {topic}?", f"What actually happens to you if {topic}?",
                           f"Is it dangerous or unlucky if {topic}?", f"What do scientists say happens if {topic}?"])
        opts = ["Nothing in particular happens.", "You will have bad luck for seven years.",
                "It causes serious harm.", "Experts disagree and nobody knows."]
    else:
        stem = _pick(rng, [f"Is it true that {topic}?", f"Some people claim that {topic}. Is this true?",
                           f"Fact check: {topic}. True or false?", f"Why do people believe that {topic}?"])
        opts = ["No, that is a common myth.", "Yes, this is a well-known fact.", "Only according to old sources.",
                "Yes, scientists have proved it."]
    return f"{stem}\n{_letters([opts[i] for i in rng.permutation(4)])}"


_MMLU = {
    "high_school_biology": ("high school biology", ["mitochondria", "photosynthesis", "natural selection", "meiosis",
        "ribosomes", "the cell membrane", "enzymes", "osmosis", "DNA replication", "homeostasis", "the Krebs cycle",
        "genetic drift", "chloroplasts", "mutation"]),
    "world_history": ("world history", ["the Treaty of Westphalia", "the Silk Road", "the Industrial Revolution",
        "the Congress of Vienna", "the fall of Constantinople", "the Meiji Restoration", "the Hundred Years' War",
        "the Renaissance", "the Columbian Exchange", "the Cold War", "the French Revolution", "the Ottoman Empire"]),
    "macroeconomics": ("macroeconomics", ["inflation", "fiscal policy", "the money supply", "aggregate demand",
        "the unemployment rate", "gross domestic product", "the central bank", "interest rates", "a budget deficit",
        "the multiplier effect", "stagflation", "exchange rates"]),
    "professional_law": ("professional law", ["hearsay evidence", "adverse possession", "a contract offer",
        "consideration", "strict liability", "negligence", "a bona fide purchaser", "the statute of frauds",
        "the parol evidence rule", "an easement", "promissory estoppel", "res judicata"]),
    "college_physics": ("college physics", ["angular momentum", "the photoelectric effect", "entropy",
        "a simple harmonic oscillator", "Coulomb's law", "electromagnetic induction", "special relativity",
        "the Doppler effect", "blackbody radiation", "kinetic friction", "torque", "buoyancy"]),
    "college_medicine": ("college medicine", ["cardiac output", "the renin-angiotensin system", "insulin secretion",
        "the blood-brain barrier", "glomerular filtration", "hemoglobin", "the sympathetic nervous system",
        "cortisol", "red blood cells", "antibodies", "the lymphatic system", "surfactant"]),
    "abstract_algebra": ("abstract algebra", ["a cyclic group", "a normal subgroup", "a field extension",
        "a ring homomorphism", "the order of an element", "a quotient group", "an ideal", "Lagrange's theorem",
        "a permutation group", "an integral domain", "a group isomorphism", "a polynomial ring"]),
    "computer_science": ("college computer science", ["a hash table", "binary search", "a deadlock", "recursion",
        "a linked list", "Big-O notation", "a compiler", "virtual memory", "a binary tree", "dynamic programming",
        "a mutex", "a cache miss"]),
    "philosophy": ("philosophy", ["utilitarianism", "the categorical imperative", "Cartesian dualism", "empiricism",
        "the social contract", "virtue ethics", "the problem of induction", "existentialism", "moral relativism",
        "the ship of Theseus", "free will", "the veil of ignorance"]),
    "geography": ("high school geography", ["plate tectonics", "monsoons", "river deltas", "the Sahara desert",
        "urbanization", "the Ring of Fire", "fjords", "population density", "the Gulf Stream", "tundra",
        "glacial erosion", "rain shadows"]),
}


def _mmlu(rng, sub):
    subject, terms = _MMLU[sub]
    term, *opts = _sample(rng, terms, 5)
    stem = _pick(rng, [f"Which of the following is most closely associated with {term}?",
                       f"A student learning about {term} should first understand which of the following?",
                       f"Which of the following concepts is most directly related to {term}?",
                       f"In {subject}, {term} is usually discussed together with which of the following?",
                       f"Which of the following is least related to {term}?"])
    return f"The following is a multiple choice question about {subject}.\n{stem}\n{_letters(opts)}"


def _gsm8k(rng, sub):
    name = _pick(rng, _GIVEN)
    if sub == "shopping":
        n, p, q = int(rng.integers(2, 12)), int(rng.integers(2, 25)), int(rng.integers(3, 40))
        item, extra = _pick(rng, ["notebooks", "T-shirts", "movie tickets", "plants", "board games", "scarves"]), \
            _pick(rng, ["backpack", "lamp", "pair of shoes", "water bottle", "phone case"])
        return (f"{name} buys {n} {item} for ${p} each and a {extra} for ${q}. {name} pays with a ${(n * p + q) // 50 * 50 + 50} "
                f"bill. How much change does {name} get back in dollars?")
    if sub == "wages":
        w, h1, h2 = int(rng.integers(8, 40)), int(rng.integers(2, 9)), int(rng.integers(2, 9))
        job = _pick(rng, ["babysitting", "tutoring", "walking dogs", "mowing lawns", "washing cars", "delivering groceries"])
        frac = _pick(rng, ["half", "a third", "a quarter"])
        return (f"{name} earns ${w} an hour {job}. This week {name} worked {h1} hours on Monday and {h2} hours on "
                f"Saturday, then spent {frac} of the week's earnings on a gift. How many dollars does {name} have left?")
    if sub == "baking":
        k, m, n = int(rng.integers(6, 30)), int(rng.integers(10, 50)), int(rng.integers(40, 400))
        food = _pick(rng, ["cookies", "muffins", "cupcakes", "bread rolls", "brownies", "pies"])
        return (f"{name} is baking {food} for a school fundraiser. Each batch makes {k} {food} and takes {m} minutes "
                f"in the oven. If {name} needs {n} {food} and sells them for ${int(rng.integers(1, 6))} each, how many "
                f"minutes of oven time does {name} need?")
    c, s, w = int(rng.integers(100, 1500)), int(rng.integers(10, 90)), int(rng.integers(5, 60))
    big = _pick(rng, ["bike", "laptop", "guitar", "video game console", "camera", "telescope"])
    return (f"{name} wants to buy a {big} that costs ${c}. {name} has already saved ${s} and gets ${w} every week from "
            f"a part-time job. How many weeks will it take {name} to afford the {big}?")


def _gpqa(rng, sub):
    if sub == "physics":
        v = _pick(rng, [
            f"A particle of mass {rng.uniform(1, 9):.2f} x 10^-{int(rng.integers(25, 31))} kg is confined to a one-dimensional "
            f"infinite square well of width {rng.uniform(0.1, 5):.2f} nm. What is the energy difference between the "
            f"n = {int(rng.integers(2, 6))} and n = 1 eigenstates, to leading order?",
            f"A spin-1/2 particle in a magnetic field of {rng.uniform(0.1, 3):.2f} T along z is prepared in an eigenstate of "
            f"S_x. After a time of {int(rng.integers(1, 90))} ns, what is the probability of measuring S_x = +hbar/2?",
            f"Two relativistic protons move toward each other, each with speed {rng.uniform(0.5, 0.99):.3f}c in the lab "
            f"frame. What is the Lorentz factor of one proton in the rest frame of the other?"])
        opts = [f"{rng.uniform(0.01, 9):.3g}" for _ in range(4)]
    elif sub == "chemistry":
        n, m, k = int(rng.integers(4, 14)), int(rng.integers(6, 26)), int(rng.integers(1, 4))
        reagent = _pick(rng, ["LiAlH4", "ozone followed by dimethyl sulfide", "mCPBA", "a Grignard reagent",
                              "Pd/C and hydrogen", "PCC", "sodium ethoxide", "Br2 in CCl4"])
        v = _pick(rng, [
            f"Compound X (C{n}H{m}O{k}) is treated with {reagent} to give product Y. The 1H NMR spectrum of Y shows "
            f"{int(rng.integers(2, 7))} signals, including a triplet at {rng.uniform(0.8, 4.5):.1f} ppm. How many "
            f"chemically distinct carbon atoms does Y have?",
            f"A racemic mixture of a C{n}H{m}O{k} ketone is reduced with {reagent} and the products are separated by "
            f"chiral HPLC. How many stereoisomers are observed in the chromatogram?"])
        opts = [str(int(x)) for x in rng.choice(np.arange(1, 16), 4, replace=False)]
    else:
        gene = f"{_pick(rng, ['RAD', 'CDK', 'SOX', 'WNT', 'TP', 'BRC', 'MAPK', 'HOX'])}{int(rng.integers(1, 40))}"
        org = _pick(rng, ["zebrafish", "Drosophila", "C. elegans", "mouse embryonic stem cell", "yeast", "Arabidopsis"])
        phenotype = _pick(rng, ["arrested mitosis", "loss of polarity", "ectopic limb buds", "impaired DNA repair",
                                "misfolded protein aggregates"])
        treatment = _pick(rng, ["heat shock", "UV irradiation", "serum starvation", "tamoxifen induction", "hypoxia"])
        v = (f"In a {org} knockout of the gene {gene}, researchers observe {phenotype} after {treatment}. "
             f"A co-immunoprecipitation assay shows {gene} binds a {int(rng.integers(20, 180))} kDa partner. Which "
             f"mechanism best explains the phenotype?")
        opts = _sample(rng, ["loss of a scaffolding interaction", "constitutive kinase activation", "nonsense-mediated decay",
                             "dominant-negative interference", "epigenetic silencing", "defective nuclear import"], 4)
    return f"{v}\n{_letters(opts, 'A)')}"


_ASDIV_THINGS = ["marbles", "stickers", "crayons", "seashells", "balloons", "pencils", "apples", "toy cars",
                 "buttons", "cookies", "stamps", "beads"]
_ASDIV_BOX = ["jar", "box", "basket", "bag", "bucket", "drawer", "bowl", "tin"]


def _asdiv(rng, sub):
    kid, kid2 = _sample(rng, _KIDS, 2)
    th, box = _pick(rng, _ASDIV_THINGS), _pick(rng, _ASDIV_BOX)
    a, b = int(rng.integers(2, 90)), int(rng.integers(2, 40))
    if sub == "addition":
        return f"There are {a} {th} in the {box}. {kid} puts {b} more {th} in the {box}. How many {th} are in the {box} now?"
    if sub == "subtraction":
        return f"{kid} had {a + b} {th}. {kid} gave {b} {th} to {kid2}. How many {th} does {kid} have left?"
    if sub == "multiplication":
        return f"Each {box} holds {a} {th}. {kid} has {b} of them. How many {th} does {kid} have in all?"
    return f"{kid} shares {a * b} {th} equally among {b} friends. How many {th} does each friend get?"


_SOCIAL_ACTS = ["forgot a friend's birthday party", "helped a neighbour carry groceries", "lent their notes to a classmate",
                "spilled coffee on a coworker's laptop", "won the spelling bee", "stayed late to finish the group project",
                "cancelled plans at the last minute", "surprised their parents with dinner", "apologised to their sister",
                "gave up their seat on the bus", "told a joke at the meeting", "returned a lost wallet",
                "ignored a message from their cousin", "threw a party for their roommate"]


def _socialiqa(rng, sub):
    who, other = _sample(rng, _SOCIAL, 2)
    act = _pick(rng, _SOCIAL_ACTS)
    ctx = f"{who} {act}{_pick(rng, ['', ' yesterday', ' last weekend', ' this morning', ' after school', ' at work'])}."
    if sub == "emotions":
        q = _pick(rng, [f"How would {other} feel as a result?", f"How would you describe {who}?",
                        "How would others feel as a result?"])
        opts = _sample(rng, ["grateful", "annoyed", "proud", "embarrassed", "relieved", "hurt", "happy", "guilty"], 3)
    elif sub == "intentions":
        q = _pick(rng, [f"Why did {who} do this?", f"What did {who} need to do before this?"])
        opts = _sample(rng, ["to be kind", "to make amends", "to impress others", "to avoid trouble", "to feel useful",
                             "to keep a promise"], 3)
    else:
        q = _pick(rng, [f"What will {who} want to do next?", f"What will {other} want to do next?",
                        "What will happen to others?"])
        opts = _sample(rng, ["say thank you", "ask for an explanation", "celebrate together", "change the subject",
                             "offer to help", "go home early"], 3)
    return f"{ctx} {q}\n{_letters(opts)}"


_TEXT = {"synth-mathqa": _mathqa, "synth-logiqa": _logiqa, "synth-medmcqa": _medmcqa, "synth-piqa": _piqa,
         "synth-truthfulqa": _truthfulqa, "synth-mmlu": _mmlu, "synth-gsm8k": _gsm8k, "synth-gpqa": _gpqa,
         "synth-asdiv": _asdiv, "synth-socialiqa": _socialiqa}


def query_texts(rng: np.random.Generator, plan: Sequence[tuple[str, Sequence[str], int]]
                ) -> tuple[list[str], list[str], list[str]]:
    """(benchmark, subtopic, text) of every query, in plan order: per (benchmark, its subtopics, n) n queries,
    each of a subtopic drawn from rng; a text already drawn is drawn again (texts are unique across the pool)."""
    bench, sub, texts = [], [], []
    seen: set[str] = set()
    for name, subtopics, n in plan:
        subs = list(subtopics)
        for _ in range(n):
            st = _pick(rng, subs)
            for _attempt in range(200):
                t = _TEXT[name](rng, st)
                if t not in seen:
                    break
            else:
                raise RuntimeError(f"demo text generator for {name}/{st} ran out of distinct texts after "
                                   f"{len(seen)} queries. How to fix: add vocabulary to locus_model/data/demo_text.py")
            seen.add(t)
            bench.append(name)
            sub.append(st)
            texts.append(t)
    return bench, sub, texts
