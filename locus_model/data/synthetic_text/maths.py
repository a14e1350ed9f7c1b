"""The maths look-alikes: synth-mathqa (rates, profit, interest, areas, ratios with lettered numeric options),
synth-gsm8k (word problems about a named person), synth-asdiv (one-step arithmetic about a child's things)."""

from __future__ import annotations

from locus_model.data.synthetic_text._common import letters, numeric_options, pick, sample

_GIVEN = [
    "Aisha",
    "Ben",
    "Carla",
    "Dmitri",
    "Elena",
    "Farid",
    "Grace",
    "Hiro",
    "Ines",
    "Jamal",
    "Kofi",
    "Lena",
    "Mateo",
    "Nadia",
    "Omar",
    "Priya",
    "Quinn",
    "Rosa",
    "Sven",
    "Tara",
    "Umar",
    "Vera",
    "Wen",
    "Yusuf",
]


_KIDS = ["Tommy", "Lily", "Sam", "Mia", "Leo", "Zoe", "Max", "Ella", "Noah", "Ruby", "Jack", "Ivy"]


def mathqa(rng, sub):
    if sub == "speed":
        v, t = int(rng.integers(36, 121)), int(rng.integers(6, 40))
        veh = pick(rng, ["train", "goods train", "bus", "truck", "car", "express train"])
        obj = pick(rng, ["pole", "man standing on the platform", "signal post", "tree", "milestone"])
        q = (
            f"a {veh} running at the speed of {v} km / hr crosses a {obj} in {t} seconds . "
            f"what is the length of the {veh} in metres ?"
        )
        ans = v * 5 / 18 * t
    elif sub == "profit":
        p, r = int(rng.integers(120, 2500)), int(rng.integers(5, 45))
        item = pick(rng, ["watch", "bicycle", "table", "radio", "chair", "book", "fan", "cycle", "article"])
        gl = pick(rng, ["profit", "gain", "loss"])
        q = f"a shopkeeper sells a {item} for rs . {p} at a {gl} of {r} % . find the cost price of the {item} ."
        ans = p / (1 + r / 100) if gl != "loss" else p / (1 - r / 100)
    elif sub == "interest":
        p, r, t = int(rng.integers(5, 200)) * 100, int(rng.integers(3, 16)), int(rng.integers(2, 9))
        kind = pick(rng, ["simple interest", "compound interest", "amount"])
        q = f"what will be the {kind} on a sum of rs . {p} at {r} % per annum for {t} years ?"
        ans = p * r * t / 100
    elif sub == "area":
        a, b, c = int(rng.integers(10, 120)), int(rng.integers(5, 80)), int(rng.integers(2, 30))
        place = pick(rng, ["rectangular field", "rectangular park", "hall floor", "square plot", "lawn", "courtyard"])
        work = pick(rng, ["levelling", "fencing", "paving", "carpeting", "tiling"])
        q = (
            f"the length of a {place} is {a} m and its breadth is {b} m . "
            f"find the cost of {work} it at rs . {c} per sq m ."
        )
        ans = a * b * c
    else:  # ratio
        a, b, s = int(rng.integers(2, 12)), int(rng.integers(2, 12)), int(rng.integers(3, 60))
        what = pick(
            rng,
            [
                "two numbers",
                "the ages of two brothers",
                "the salaries of a and b",
                "two angles",
                "the incomes of p and q",
            ],
        )
        q = f"{what} are in the ratio {a} : {b} . if their sum is {s * (a + b)} , what is the larger value ?"
        ans = s * max(a, b)
    return f"{q} options : {letters(numeric_options(rng, ans, 5), 'a )')}"


def gsm8k(rng, sub):
    name = pick(rng, _GIVEN)
    if sub == "shopping":
        n, p, q = int(rng.integers(2, 12)), int(rng.integers(2, 25)), int(rng.integers(3, 40))
        item, extra = (
            pick(rng, ["notebooks", "T-shirts", "movie tickets", "plants", "board games", "scarves"]),
            pick(rng, ["backpack", "lamp", "pair of shoes", "water bottle", "phone case"]),
        )
        return (
            f"{name} buys {n} {item} for ${p} each and a {extra} for ${q}. {name} pays with a "
            f"${(n * p + q) // 50 * 50 + 50} "
            f"bill. How much change does {name} get back in dollars?"
        )
    if sub == "wages":
        w, h1, h2 = int(rng.integers(8, 40)), int(rng.integers(2, 9)), int(rng.integers(2, 9))
        job = pick(
            rng, ["babysitting", "tutoring", "walking dogs", "mowing lawns", "washing cars", "delivering groceries"]
        )
        frac = pick(rng, ["half", "a third", "a quarter"])
        return (
            f"{name} earns ${w} an hour {job}. This week {name} worked {h1} hours on Monday and {h2} hours on "
            f"Saturday, then spent {frac} of the week's earnings on a gift. How many dollars does {name} have left?"
        )
    if sub == "baking":
        k, m, n = int(rng.integers(6, 30)), int(rng.integers(10, 50)), int(rng.integers(40, 400))
        food = pick(rng, ["cookies", "muffins", "cupcakes", "bread rolls", "brownies", "pies"])
        return (
            f"{name} is baking {food} for a school fundraiser. Each batch makes {k} {food} and takes {m} minutes "
            f"in the oven. If {name} needs {n} {food} and sells them for ${int(rng.integers(1, 6))} each, how many "
            f"minutes of oven time does {name} need?"
        )
    c, s, w = int(rng.integers(100, 1500)), int(rng.integers(10, 90)), int(rng.integers(5, 60))
    big = pick(rng, ["bike", "laptop", "guitar", "video game console", "camera", "telescope"])
    return (
        f"{name} wants to buy a {big} that costs ${c}. {name} has already saved ${s} and gets ${w} every week from "
        f"a part-time job. How many weeks will it take {name} to afford the {big}?"
    )


_ASDIV_THINGS = [
    "marbles",
    "stickers",
    "crayons",
    "seashells",
    "balloons",
    "pencils",
    "apples",
    "toy cars",
    "buttons",
    "cookies",
    "stamps",
    "beads",
]


_ASDIV_BOX = ["jar", "box", "basket", "bag", "bucket", "drawer", "bowl", "tin"]


def asdiv(rng, sub):
    kid, kid2 = sample(rng, _KIDS, 2)
    th, box = pick(rng, _ASDIV_THINGS), pick(rng, _ASDIV_BOX)
    a, b = int(rng.integers(2, 90)), int(rng.integers(2, 40))
    if sub == "addition":
        return (
            f"There are {a} {th} in the {box}. {kid} puts {b} more {th} in the {box}. "
            f"How many {th} are in the {box} now?"
        )
    if sub == "subtraction":
        return f"{kid} had {a + b} {th}. {kid} gave {b} {th} to {kid2}. How many {th} does {kid} have left?"
    if sub == "multiplication":
        return f"Each {box} holds {a} {th}. {kid} has {b} of them. How many {th} does {kid} have in all?"
    return f"{kid} shares {a * b} {th} equally among {b} friends. How many {th} does each friend get?"
