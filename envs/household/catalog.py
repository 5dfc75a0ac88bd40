"""The household catalogue: object and receptacle types, rooms, what fits where, task types and their wording.

Names follow ALFWorld (lower case, no spaces: ``sinkbasin``, ``desklamp``, ``butterknife``) so that prompts,
commands and feedback read exactly like ALFWorld's. Everything here is immutable module data.

>>> "apple" in HEATABLE and "microwave" in ACCEPTS and "apple" in ACCEPTS["microwave"]
True
>>> TASK_TYPES[0], APPLIANCE["pick_heat_then_place_in_recep"]
('pick_and_place_simple', 'microwave')
"""

from __future__ import annotations

from types import MappingProxyType

# -- task types ---------------------------------------------------------------------------------------
TASK_TYPES: tuple[str, ...] = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
SIMPLE, LIGHT, CLEAN, HEAT, COOL, TWO = TASK_TYPES
#: The receptacle type each state-changing task needs (clean: sinkbasin, heat: microwave, cool: fridge).
APPLIANCE: MappingProxyType[str, str] = MappingProxyType({CLEAN: "sinkbasin", HEAT: "microwave", COOL: "fridge"})
#: Task descriptions (``{o}`` object type, ``{r}`` receptacle type), as ALFWorld words them.
TASK_TEMPLATES: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        SIMPLE: ("put a {o} in {r}.", "put some {o} on {r}."),
        LIGHT: ("look at {o} under the desklamp.", "examine the {o} with the desklamp."),
        CLEAN: ("put a clean {o} in {r}.", "clean some {o} and put it in {r}."),
        HEAT: ("put a hot {o} in {r}.", "heat some {o} and put it in {r}."),
        COOL: ("put a cool {o} in {r}.", "cool some {o} and put it in {r}."),
        TWO: ("put two {o} in {r}.", "find two {o} and put them in {r}."),
    }
)

# -- objects --------------------------------------------------------------------------------------------
FOOD = ("apple", "bread", "egg", "lettuce", "potato", "tomato")
DISHES = ("bowl", "cup", "mug", "plate")
COOKWARE = ("kettle", "pan", "pot")
UTENSILS = ("butterknife", "fork", "knife", "ladle", "spatula", "spoon")
KITCHEN_SMALL = ("dishsponge", "glassbottle", "papertowelroll", "peppershaker", "saltshaker", "soapbottle",
                 "spraybottle", "winebottle")  # fmt: skip
BATH = ("candle", "cloth", "handtowel", "plunger", "scrubbrush", "soapbar", "soapbottle", "spraybottle", "tissuebox",
        "toiletpaper", "towel")  # fmt: skip
DESK = ("alarmclock", "book", "box", "cd", "cellphone", "creditcard", "keychain", "laptop", "newspaper", "pen",
        "pencil", "pillow", "remotecontrol", "statue", "teddybear", "vase", "watch")  # fmt: skip
SPORT = ("baseballbat", "basketball", "tennisracket")
#: Toggleable, not pickupable: the light source of ``look_at_obj_in_light``.
LAMP = "desklamp"
SLICERS: frozenset[str] = frozenset({"knife", "butterknife"})

HEATABLE: frozenset[str] = frozenset({"apple", "bread", "cup", "egg", "mug", "plate", "potato", "tomato"})
COOLABLE: frozenset[str] = frozenset(
    {"apple", "bowl", "bread", "cup", "lettuce", "mug", "pan", "plate", "pot", "potato", "tomato", "winebottle"}
)
CLEANABLE: frozenset[str] = frozenset(
    {"apple", "bowl", "butterknife", "cloth", "cup", "dishsponge", "egg", "fork", "kettle", "knife", "ladle",
     "lettuce", "mug", "pan", "plate", "pot", "potato", "soapbar", "spatula", "spoon", "tomato"}
)  # fmt: skip
SLICEABLE: frozenset[str] = frozenset({"apple", "bread", "lettuce", "potato", "tomato"})
#: Objects ``look_at_obj_in_light`` asks for.
LIGHT_TARGETS: frozenset[str] = frozenset(
    {"alarmclock", "book", "bowl", "box", "candle", "cd", "cellphone", "creditcard", "keychain", "laptop", "mug",
     "newspaper", "pen", "pencil", "pillow", "remotecontrol", "statue", "teddybear", "tissuebox", "vase", "watch"}
)  # fmt: skip

# -- receptacles: what each one accepts ----------------------------------------------------------------
_SMALL_DESK = ("alarmclock", "book", "cd", "cellphone", "creditcard", "keychain", "newspaper", "pen", "pencil",
               "remotecontrol", "watch")  # fmt: skip
_KITCHEN = FOOD + DISHES + COOKWARE + UTENSILS + KITCHEN_SMALL
_SURFACE = tuple(dict.fromkeys((*_KITCHEN, *BATH, *DESK, "mug", "bowl")))
_SEAT = ("book", "box", "cellphone", "creditcard", "keychain", "laptop", "newspaper", "pillow", "remotecontrol",
         "teddybear")  # fmt: skip
_CABINET = tuple(dict.fromkeys((*_KITCHEN, *BATH, "book", "box", "candle", "cd", "statue", "vase", "tissuebox")))
_DRAWER = tuple(dict.fromkeys(UTENSILS + _SMALL_DESK + ("candle", "cloth", "dishsponge", "handtowel", "peppershaker",
                                                        "saltshaker", "soapbar", "spraybottle", "tissuebox",
                                                        "toiletpaper", "towel")))  # fmt: skip
_GARBAGE = tuple(dict.fromkeys((*FOOD, "candle", "cd", "cloth", "creditcard", "dishsponge", "glassbottle", "newspaper",
                                 "papertowelroll", "pen", "pencil", "soapbar", "soapbottle", "spraybottle", "tissuebox",
                                 "toiletpaper", "winebottle")))  # fmt: skip

ACCEPTS: MappingProxyType[str, frozenset[str]] = MappingProxyType(
    {
        "armchair": frozenset(_SEAT),
        "bathtubbasin": frozenset({"cloth", "dishsponge", "scrubbrush", "soapbar", "soapbottle"}),
        "bed": frozenset((*_SEAT, *SPORT)),
        "cabinet": frozenset(_CABINET),
        "cart": frozenset(_SURFACE),
        "coffeemachine": frozenset({"cup", "mug"}),
        "coffeetable": frozenset(_SURFACE),
        "countertop": frozenset(_SURFACE),
        "desk": frozenset((*_SURFACE, *SPORT)),
        "diningtable": frozenset(_SURFACE),
        "drawer": frozenset(_DRAWER),
        "dresser": frozenset((*_SURFACE, *SPORT)),
        "fridge": frozenset(FOOD + DISHES + ("pan", "pot", "winebottle", "glassbottle")),
        "garbagecan": frozenset(_GARBAGE),
        "handtowelholder": frozenset({"handtowel"}),
        "laundryhamper": frozenset({"cloth", "handtowel", "towel"}),
        "microwave": frozenset(HEATABLE | {"bowl"}),
        "ottoman": frozenset(_SEAT),
        "safe": frozenset({"cd", "cellphone", "creditcard", "keychain", "statue", "vase", "watch"}),
        "shelf": frozenset(_SURFACE),
        "sidetable": frozenset(_SURFACE),
        "sinkbasin": frozenset(FOOD + DISHES + COOKWARE + UTENSILS + ("cloth", "dishsponge", "soapbar")),
        "sofa": frozenset(_SEAT),
        "stoveburner": frozenset(COOKWARE),
        "toaster": frozenset(),
        "toilet": frozenset({"candle", "cloth", "soapbar", "soapbottle", "spraybottle", "tissuebox", "toiletpaper"}),
        "toiletpaperhanger": frozenset({"toiletpaper"}),
        "towelholder": frozenset({"towel"}),
        "tvstand": frozenset(_SURFACE),
    }
)
OPENABLE: frozenset[str] = frozenset({"cabinet", "drawer", "fridge", "microwave", "safe"})
#: Receptacles a desk lamp can stand on.
LAMP_HOLDERS: frozenset[str] = frozenset({"desk", "dresser", "sidetable"})

# -- rooms ------------------------------------------------------------------------------------------------
ROOMS: tuple[str, ...] = ("kitchen", "livingroom", "bedroom", "bathroom")
#: Receptacle count ranges per room; the order is the priority kept when ``max_receptacles`` caps a layout.
ROOM_RECEPTACLES: MappingProxyType[str, tuple[tuple[str, int, int], ...]] = MappingProxyType(
    {
        "kitchen": (("countertop", 1, 3), ("fridge", 1, 1), ("microwave", 1, 1), ("sinkbasin", 1, 2),
                    ("cabinet", 3, 14), ("drawer", 1, 10), ("stoveburner", 2, 4), ("diningtable", 0, 2),
                    ("coffeemachine", 1, 1), ("garbagecan", 1, 1), ("toaster", 1, 1), ("shelf", 0, 3)),
        "livingroom": (("sofa", 1, 1), ("sidetable", 1, 3), ("coffeetable", 1, 2), ("drawer", 0, 6),
                       ("cabinet", 0, 4), ("armchair", 0, 2), ("tvstand", 0, 1), ("shelf", 0, 6),
                       ("garbagecan", 1, 1), ("diningtable", 0, 1), ("ottoman", 0, 1), ("dresser", 0, 1),
                       ("safe", 0, 1)),
        "bedroom": (("bed", 1, 1), ("sidetable", 1, 2), ("drawer", 2, 10), ("desk", 0, 1), ("dresser", 0, 1),
                    ("shelf", 0, 8), ("garbagecan", 1, 1), ("laundryhamper", 0, 1), ("armchair", 0, 1),
                    ("safe", 0, 1), ("cabinet", 0, 2)),
        "bathroom": (("countertop", 1, 1), ("sinkbasin", 1, 2), ("toilet", 1, 1), ("cabinet", 1, 4),
                     ("toiletpaperhanger", 1, 1), ("towelholder", 0, 2), ("handtowelholder", 0, 2),
                     ("bathtubbasin", 0, 1), ("drawer", 0, 4), ("shelf", 0, 3), ("garbagecan", 1, 1),
                     ("dresser", 0, 1)),
    }
)  # fmt: skip
#: Object types found in each room (besides the desk lamp of living rooms and bedrooms).
ROOM_OBJECTS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "kitchen": tuple(dict.fromkeys((*_KITCHEN, "cellphone", "creditcard"))),
        "livingroom": tuple(dict.fromkeys((*DESK, "mug", "bowl", "candle", "tissuebox"))),
        "bedroom": tuple(dict.fromkeys(DESK + SPORT + ("mug", "bowl", "candle", "cloth", "tissuebox"))),
        "bathroom": tuple(dict.fromkeys((*BATH, "dishsponge"))),
    }
)
#: Rooms each task type can be set in.
TASK_ROOMS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        SIMPLE: ROOMS,
        TWO: ROOMS,
        LIGHT: ("livingroom", "bedroom"),
        CLEAN: ("kitchen", "bathroom"),
        HEAT: ("kitchen",),
        COOL: ("kitchen",),
    }
)
LAMP_ROOMS: frozenset[str] = frozenset({"livingroom", "bedroom"})


def task_targets(task_type: str, room: str) -> tuple[str, ...]:
    """Object types a task of ``task_type`` may ask for in ``room`` (in a fixed order)."""
    objs = ROOM_OBJECTS[room]
    if task_type == LIGHT:
        return tuple(o for o in objs if o in LIGHT_TARGETS)
    if task_type == CLEAN:
        return tuple(o for o in objs if o in CLEANABLE)
    if task_type == HEAT:
        return tuple(o for o in objs if o in HEATABLE)
    if task_type == COOL:
        return tuple(o for o in objs if o in COOLABLE)
    return objs
