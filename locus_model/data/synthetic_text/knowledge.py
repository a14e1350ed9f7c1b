"""The knowledge look-alikes: synth-medmcqa (drugs, anatomy, pathology, microbiology), synth-truthfulqa (myths,
superstitions, health and history misconceptions), synth-mmlu (subjects and their terms), synth-gpqa (graduate
physics, chemistry and biology)."""

from __future__ import annotations

import numpy as np

from locus_model.data.synthetic_text._common import letters, pick, sample

_DRUGS = [
    "Metformin",
    "Amiodarone",
    "Ceftriaxone",
    "Methotrexate",
    "Propranolol",
    "Lithium",
    "Warfarin",
    "Digoxin",
    "Isoniazid",
    "Phenytoin",
    "Clozapine",
    "Furosemide",
    "Spironolactone",
    "Allopurinol",
    "Ondansetron",
]


_CONDITIONS = [
    "absence seizures",
    "hyperthyroidism in pregnancy",
    "acute gout",
    "malignant hyperthermia",
    "trigeminal neuralgia",
    "status epilepticus",
    "Wilson disease",
    "paracetamol poisoning",
    "organophosphate poisoning",
    "neurocysticercosis",
    "MRSA infection",
    "myasthenia gravis",
]


_MUSCLES = [
    "deltoid",
    "serratus anterior",
    "lateral rectus",
    "diaphragm",
    "supinator",
    "stapedius",
    "tibialis anterior",
    "platysma",
    "latissimus dorsi",
    "gluteus medius",
    "genioglossus",
    "cricothyroid",
]


_NERVES = [
    "axillary nerve",
    "long thoracic nerve",
    "abducens nerve",
    "phrenic nerve",
    "radial nerve",
    "facial nerve",
    "deep peroneal nerve",
    "hypoglossal nerve",
    "thoracodorsal nerve",
    "superior gluteal nerve",
    "recurrent laryngeal nerve",
    "musculocutaneous nerve",
]


_FINDINGS = [
    "Reed-Sternberg cells",
    "Aschoff bodies",
    "Councilman bodies",
    "Mallory hyaline",
    "psammoma bodies",
    "Russell bodies",
    "Negri bodies",
    "Call-Exner bodies",
    "Howell-Jolly bodies",
    "Auer rods",
    "Birbeck granules",
    "Lewy bodies",
]


_DISEASES = [
    "Hodgkin lymphoma",
    "rheumatic fever",
    "yellow fever",
    "alcoholic hepatitis",
    "papillary carcinoma",
    "multiple myeloma",
    "rabies",
    "granulosa cell tumour",
    "asplenia",
    "acute myeloid leukaemia",
    "Langerhans cell histiocytosis",
    "Parkinson disease",
]


_ORGANISMS = [
    "Clostridium tetani",
    "Vibrio cholerae",
    "Treponema pallidum",
    "Corynebacterium diphtheriae",
    "Bordetella pertussis",
    "Leptospira interrogans",
    "Mycobacterium leprae",
    "Rickettsia prowazekii",
    "Entamoeba histolytica",
    "Plasmodium falciparum",
    "Helicobacter pylori",
    "Listeria monocytogenes",
]


def medmcqa(rng, sub):
    age, sex = int(rng.integers(4, 80)), pick(rng, ["male", "female"])
    if sub == "pharmacology":
        cond = pick(rng, _CONDITIONS)
        stem = pick(
            rng,
            [
                f"Drug of choice for {cond} is:",
                f"A {age}-year-old {sex} patient is diagnosed with {cond}. The drug of choice is:",
                f"Which drug is contraindicated in a {age}-year-old {sex} with {cond}?",
            ],
        )
        return f"{stem}\n{letters(sample(rng, _DRUGS, 4))}"
    if sub == "anatomy":
        mus = pick(rng, _MUSCLES)
        stem = pick(
            rng,
            [
                f"Nerve supply of the {mus} is:",
                f"Injury to which nerve causes paralysis of the {mus}?",
                f"A {age}-year-old {sex} has weakness of the {mus} after surgery. The nerve injured is:",
            ],
        )
        return f"{stem}\n{letters(sample(rng, _NERVES, 4))}"
    if sub == "pathology":
        fnd = pick(rng, _FINDINGS)
        stem = pick(
            rng,
            [
                f"{fnd} are characteristically seen in:",
                f"Biopsy from a {age}-year-old {sex} shows {fnd}. The most likely diagnosis is:",
                f"Histopathology showing {fnd} is pathognomonic of:",
            ],
        )
        return f"{stem}\n{letters(sample(rng, _DISEASES, 4))}"
    dis = pick(
        rng,
        [
            "tetanus",
            "cholera",
            "syphilis",
            "diphtheria",
            "whooping cough",
            "leptospirosis",
            "leprosy",
            "epidemic typhus",
            "amoebic dysentery",
            "cerebral malaria",
            "peptic ulcer",
            "neonatal meningitis",
        ],
    )
    stem = pick(
        rng,
        [
            f"Causative organism of {dis} is:",
            f"A {age}-year-old {sex} presents with {dis}. The organism most likely responsible is:",
            f"Which organism is the most common cause of {dis}?",
        ],
    )
    return f"{stem}\n{letters(sample(rng, _ORGANISMS, 4))}"


_TRUTHFUL = {
    "misconceptions": [
        "we only use ten percent of our brains",
        "goldfish have a three-second memory",
        "bulls are angered by the colour red",
        "lightning never strikes the same place twice",
        "bats are blind",
        "the Great Wall is visible from space with the naked eye",
        "cracking knuckles causes arthritis",
        "humans have five senses",
        "chameleons change colour to camouflage",
    ],
    "superstitions": [
        "you break a mirror",
        "you open an umbrella indoors",
        "a black cat crosses your path",
        "you step on a crack in the pavement",
        "you walk under a ladder",
        "you find a four-leaf clover",
        "you knock on wood",
        "you spill salt",
        "you whistle at night",
    ],
    "health": [
        "you swallow chewing gum",
        "you go outside with wet hair in winter",
        "you eat right before swimming",
        "you read in dim light",
        "you drink eight glasses of water a day",
        "you sit too close to the television",
        "you wake a sleepwalker",
        "you take vitamin C for a cold",
        "you crack your back every day",
    ],
    "history": [
        "Napoleon was unusually short",
        "Vikings wore horned helmets",
        "medieval people thought the Earth was flat",
        "Einstein failed mathematics at school",
        "Marie Antoinette said 'let them eat cake'",
        "Columbus proved the Earth was round",
        "the Titanic was called unsinkable by its builders",
        "Nero fiddled while Rome burned",
        "witches were burned at the stake in Salem",
    ],
}


def truthfulqa(rng, sub):
    topic = pick(rng, _TRUTHFUL[sub])
    if sub in ("superstitions", "health"):
        stem = pick(
            rng,
            [
                f"What happens if {topic}?",
                f"What actually happens to you if {topic}?",
                f"Is it dangerous or unlucky if {topic}?",
                f"What do scientists say happens if {topic}?",
            ],
        )
        opts = [
            "Nothing in particular happens.",
            "You will have bad luck for seven years.",
            "It causes serious harm.",
            "Experts disagree and nobody knows.",
        ]
    else:
        stem = pick(
            rng,
            [
                f"Is it true that {topic}?",
                f"Some people claim that {topic}. Is this true?",
                f"Fact check: {topic}. True or false?",
                f"Why do people believe that {topic}?",
            ],
        )
        opts = [
            "No, that is a common myth.",
            "Yes, this is a well-known fact.",
            "Only according to old sources.",
            "Yes, scientists have proved it.",
        ]
    return f"{stem}\n{letters([opts[i] for i in rng.permutation(4)])}"


_MMLU = {
    "high_school_biology": (
        "high school biology",
        [
            "mitochondria",
            "photosynthesis",
            "natural selection",
            "meiosis",
            "ribosomes",
            "the cell membrane",
            "enzymes",
            "osmosis",
            "DNA replication",
            "homeostasis",
            "the Krebs cycle",
            "genetic drift",
            "chloroplasts",
            "mutation",
        ],
    ),
    "world_history": (
        "world history",
        [
            "the Treaty of Westphalia",
            "the Silk Road",
            "the Industrial Revolution",
            "the Congress of Vienna",
            "the fall of Constantinople",
            "the Meiji Restoration",
            "the Hundred Years' War",
            "the Renaissance",
            "the Columbian Exchange",
            "the Cold War",
            "the French Revolution",
            "the Ottoman Empire",
        ],
    ),
    "macroeconomics": (
        "macroeconomics",
        [
            "inflation",
            "fiscal policy",
            "the money supply",
            "aggregate demand",
            "the unemployment rate",
            "gross domestic product",
            "the central bank",
            "interest rates",
            "a budget deficit",
            "the multiplier effect",
            "stagflation",
            "exchange rates",
        ],
    ),
    "professional_law": (
        "professional law",
        [
            "hearsay evidence",
            "adverse possession",
            "a contract offer",
            "consideration",
            "strict liability",
            "negligence",
            "a bona fide purchaser",
            "the statute of frauds",
            "the parol evidence rule",
            "an easement",
            "promissory estoppel",
            "res judicata",
        ],
    ),
    "college_physics": (
        "college physics",
        [
            "angular momentum",
            "the photoelectric effect",
            "entropy",
            "a simple harmonic oscillator",
            "Coulomb's law",
            "electromagnetic induction",
            "special relativity",
            "the Doppler effect",
            "blackbody radiation",
            "kinetic friction",
            "torque",
            "buoyancy",
        ],
    ),
    "college_medicine": (
        "college medicine",
        [
            "cardiac output",
            "the renin-angiotensin system",
            "insulin secretion",
            "the blood-brain barrier",
            "glomerular filtration",
            "hemoglobin",
            "the sympathetic nervous system",
            "cortisol",
            "red blood cells",
            "antibodies",
            "the lymphatic system",
            "surfactant",
        ],
    ),
    "abstract_algebra": (
        "abstract algebra",
        [
            "a cyclic group",
            "a normal subgroup",
            "a field extension",
            "a ring homomorphism",
            "the order of an element",
            "a quotient group",
            "an ideal",
            "Lagrange's theorem",
            "a permutation group",
            "an integral domain",
            "a group isomorphism",
            "a polynomial ring",
        ],
    ),
    "computer_science": (
        "college computer science",
        [
            "a hash table",
            "binary search",
            "a deadlock",
            "recursion",
            "a linked list",
            "Big-O notation",
            "a compiler",
            "virtual memory",
            "a binary tree",
            "dynamic programming",
            "a mutex",
            "a cache miss",
        ],
    ),
    "philosophy": (
        "philosophy",
        [
            "utilitarianism",
            "the categorical imperative",
            "Cartesian dualism",
            "empiricism",
            "the social contract",
            "virtue ethics",
            "the problem of induction",
            "existentialism",
            "moral relativism",
            "the ship of Theseus",
            "free will",
            "the veil of ignorance",
        ],
    ),
    "geography": (
        "high school geography",
        [
            "plate tectonics",
            "monsoons",
            "river deltas",
            "the Sahara desert",
            "urbanization",
            "the Ring of Fire",
            "fjords",
            "population density",
            "the Gulf Stream",
            "tundra",
            "glacial erosion",
            "rain shadows",
        ],
    ),
}


def mmlu(rng, sub):
    subject, terms = _MMLU[sub]
    term, *opts = sample(rng, terms, 5)
    stem = pick(
        rng,
        [
            f"Which of the following is most closely associated with {term}?",
            f"A student learning about {term} should first understand which of the following?",
            f"Which of the following concepts is most directly related to {term}?",
            f"In {subject}, {term} is usually discussed together with which of the following?",
            f"Which of the following is least related to {term}?",
        ],
    )
    return f"The following is a multiple choice question about {subject}.\n{stem}\n{letters(opts)}"


def gpqa(rng, sub):
    if sub == "physics":
        v = pick(
            rng,
            [
                f"A particle of mass {rng.uniform(1, 9):.2f} x "
                f"10^-{int(rng.integers(25, 31))} kg is confined to a one-dimensional "
                f"infinite square well of width {rng.uniform(0.1, 5):.2f} nm. What is the energy difference between "
                f"the n = {int(rng.integers(2, 6))} and n = 1 eigenstates, to leading order?",
                f"A spin-1/2 particle in a magnetic field of {rng.uniform(0.1, 3):.2f} "
                "T along z is prepared in an eigenstate of "
                f"S_x. After a time of {int(rng.integers(1, 90))} ns, what "
                "is the probability of measuring S_x = +hbar/2?",
                f"Two relativistic protons move toward each other, each with speed {rng.uniform(0.5, 0.99):.3f}c in "
                f"the lab frame. What is the Lorentz factor of one proton in the rest frame of the other?",
            ],
        )
        opts = [f"{rng.uniform(0.01, 9):.3g}" for _ in range(4)]
    elif sub == "chemistry":
        n, m, k = int(rng.integers(4, 14)), int(rng.integers(6, 26)), int(rng.integers(1, 4))
        reagent = pick(
            rng,
            [
                "LiAlH4",
                "ozone followed by dimethyl sulfide",
                "mCPBA",
                "a Grignard reagent",
                "Pd/C and hydrogen",
                "PCC",
                "sodium ethoxide",
                "Br2 in CCl4",
            ],
        )
        v = pick(
            rng,
            [
                f"Compound X (C{n}H{m}O{k}) is treated with {reagent} to give "
                "product Y. The 1H NMR spectrum of Y shows "
                f"{int(rng.integers(2, 7))} signals, including a triplet at {rng.uniform(0.8, 4.5):.1f} ppm. How many "
                f"chemically distinct carbon atoms does Y have?",
                f"A racemic mixture of a C{n}H{m}O{k} ketone is reduced with {reagent} and the products are separated "
                f"by chiral HPLC. How many stereoisomers are observed in the chromatogram?",
            ],
        )
        opts = [str(int(x)) for x in rng.choice(np.arange(1, 16), 4, replace=False)]
    else:
        gene = f"{pick(rng, ['RAD', 'CDK', 'SOX', 'WNT', 'TP', 'BRC', 'MAPK', 'HOX'])}{int(rng.integers(1, 40))}"
        org = pick(rng, ["zebrafish", "Drosophila", "C. elegans", "mouse embryonic stem cell", "yeast", "Arabidopsis"])
        phenotype = pick(
            rng,
            [
                "arrested mitosis",
                "loss of polarity",
                "ectopic limb buds",
                "impaired DNA repair",
                "misfolded protein aggregates",
            ],
        )
        treatment = pick(rng, ["heat shock", "UV irradiation", "serum starvation", "tamoxifen induction", "hypoxia"])
        v = (
            f"In a {org} knockout of the gene {gene}, researchers observe {phenotype} after {treatment}. "
            f"A co-immunoprecipitation assay shows {gene} binds a {int(rng.integers(20, 180))} kDa partner. Which "
            f"mechanism best explains the phenotype?"
        )
        opts = sample(
            rng,
            [
                "loss of a scaffolding interaction",
                "constitutive kinase activation",
                "nonsense-mediated decay",
                "dominant-negative interference",
                "epigenetic silencing",
                "defective nuclear import",
            ],
            4,
        )
    return f"{v}\n{letters(opts, 'A)')}"
