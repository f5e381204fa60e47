"""Sentence frames of the default corpus: real sentence templates with one slot or more per class.

Slots: `{cardinal}`, `{ordinal}`, `{percentage}`, `{decimal}`, `{money}`, `{year}` (the bare year:
the frame holds its context word), `{date}`, `{time}`, `{phone}`, `{measure}` or one unit group
(`{length}`, `{weight}`, `{volume}`, `{speed}`), `{things}` / `{thing}` (a plural / singular noun of
`THINGS`), `{temperature}`, `{negative}`, `{decade}`, `{fraction}`, `{time24}`, `{isodate}`,
`{roman}`, `{word}` (an open-vocabulary filler word) and `{Name}` (a capitalized filler word).
"""

from __future__ import annotations

import re

FRAMES: dict[str, tuple[str, ...]] = {
    "cardinal": (
        "We counted {cardinal} {things}.", "There are {cardinal} {things} in the {word} room.",
        "The city has {cardinal} people.", "About {cardinal} {things} were sold last year.",
        "{Name} scored {cardinal} points.", "The file is {cardinal} bytes long.",
        "Add {cardinal} and {cardinal}.", "Only {cardinal} {things} are left.",
        "The crowd reached {cardinal} by noon.", "They shipped {cardinal} {things} to {Name}.",
        "Page {cardinal} is missing.", "We need {cardinal} more {things}, not {cardinal}.",
        "{Name} has {cardinal} followers.", "The answer is {cardinal}.",
        "Nearly {cardinal} {things} arrived today.", "Room {cardinal} is on the left.",
    ),
    "ordinal": (
        "She finished {ordinal} in the race.", "It is the {ordinal} time this week.",
        "We live on the {ordinal} floor.", "Today is our {ordinal} anniversary.",
        "The {ordinal} visitor wins a prize.", "{Name} came {ordinal} among {cardinal} runners.",
        "This is the {ordinal} {thing} I have seen.", "Happy {ordinal} birthday, {Name}!",
    ),
    "percentage": (
        "Prices rose {percentage} this year.", "The battery is at {percentage}.",
        "About {percentage} of the {things} were {word}.", "Sales fell by {percentage} last month.",
        "Turnout was {percentage}, up from {percentage}.", "Save {percentage} on every {thing}.",
        "The rate is now {percentage}.",
    ),
    "decimal": (
        "Pi is {decimal} roughly.", "The score was {decimal} out of ten.",
        "The rate is {decimal} per {word}.", "Multiply it by {decimal} first.",
        "Its value dropped to {decimal} overnight.", "The ratio was {decimal}, not {decimal}.",
        "{Name} ran it in {decimal} seconds.",
    ),
    "money": (
        "It costs {money} today.", "The ticket was {money}, not {money}.",
        "{Name} paid {money} for the {thing}.", "We raised {money} for the {word} fund.",
        "Lunch came to {money} each.", "The fine is {money} per day.",
        "A {thing} sells for {money} online.", "Rent went up to {money} a month.",
    ),
    "year": (
        "Born in {year} in {Name}.", "She has lived here since {year}.",
        "The bridge will be finished by {year}.", "The class of {year} met again.",
        "In {year}, the {thing} was rebuilt.", "The film ({year}) won {cardinal} awards.",
        "{Name} moved to {Name} in {year}.", "Nothing has changed since {year}.",
        "The {thing} dates from the summer of {year}.",
    ),
    "date": (
        "We met on {date}.", "The deadline is {date}.", "{Name} was born on {date}.",
        "Tickets go on sale {date}.", "The store reopens on {date}.", "On {date}, it snowed.",
    ),
    "time": (
        "Meet me at {time}.", "The train leaves at {time}.",
        "The store opens at {time} and closes at {time}.", "It was {time} when {Name} called.",
        "Set the alarm for {time}.", "Lunch is served from {time} to {time}.",
    ),
    "measure": (
        "The trail is {length} long.", "The box weighs {weight}.", "Drink {volume} of water a day.",
        "The speed limit is {speed}.", "The {thing} is {length} wide and weighs {weight}.",
        "Add {volume} of milk and {weight} of sugar.", "We drove {length} at {speed}.",
        "The storm moved at {measure}.",
    ),
    "phone": (
        "Call {phone} now.", "Her number is {phone}.", "Text {Name} at {phone}.",
        "For help, dial {phone}.", "The {word} office is at {phone}.",
    ),
    "temperature": (
        "It's {temperature} outside.", "The water boils at {temperature}.",
        "Bake it at {temperature} for an hour.",
        "It dropped to {temperature} last night in {Name}.", "Keep the {thing} below {temperature}.",
        "The high today is {temperature}, the low {temperature}.",
    ),
    "negative": (
        "The balance is {negative} now.", "Set the offset to {negative}.", "The score ended at {negative}.",
        "Multiply it by {negative} first.", "The value went from {cardinal} to {negative}.",
        "Growth was {negative} this quarter.",
    ),
    "decade": (
        "The {decade} saw a lot of {things}.", "{Name} grew up in the {decade}.",
        "It was built in the {decade}.",
        "Music from the {decade} is back.", "She is in her {decade} now.", "Prices of the {decade} were low.",
    ),
    "fraction": (
        "About {fraction} of cases were {word}.", "Add {fraction} cup of sugar.", "It took {fraction} hours.",
        "Only {fraction} of the {things} were sold.", "Cut the {thing} into {fraction} pieces.",
        "{Name} ate {fraction} of the cake.",
    ),
    "time24": (
        "The train leaves at {time24}.", "The shop opens at {time24} and closes at {time24}.",
        "Check-in is at {time24}.", "The flight lands at {time24} in {Name}.", "We start at {time24} sharp.",
    ),
    "isodate": (
        "The release is dated {isodate}.", "Logged on {isodate} by {Name}.", "The deadline is {isodate}.",
        "Version {cardinal} shipped on {isodate}.", "The file from {isodate} is missing.",
    ),
    "roman": (
        "{roman} was a long story.", "We read about {roman} today.", "The film covers {roman}.",
        "See {roman} for the {word} details.", "Nobody liked {roman} at first.",
    ),
    "mixed": (
        "The meeting moved to {time} on {date}.", "On {date}, {Name} paid {money} for {cardinal} {things}.",
        "In {year}, about {percentage} of the {things} cost under {money}.",
        "Call {phone} before {time} to save {percentage}.",
        "The {ordinal} shipment of {weight} arrived at {time} on {date}.",
        "Since {year}, the town has grown by {percentage} to {cardinal} people.",
        "{Name} ran {length} in {decimal} minutes on {date}.",
        "The {ordinal} {thing} costs {money} and weighs {weight}.",
        "On {isodate} at {time24}, it was {temperature}.",
        "In the {decade}, {fraction} of the {things} cost {money}.",
        "Call {phone} before {time24} about {roman}.", "The balance fell to {negative} on {date}.",
    ),
}
THINGS = (
    ("bird", "birds"), ("apple", "apples"), ("book", "books"), ("car", "cars"), ("tree", "trees"),
    ("house", "houses"), ("ticket", "tickets"), ("letter", "letters"), ("chair", "chairs"),
    ("bottle", "bottles"), ("coin", "coins"), ("phone", "phones"), ("student", "students"),
    ("horse", "horses"), ("window", "windows"), ("boat", "boats"), ("shirt", "shirts"),
    ("table", "tables"), ("lamp", "lamps"), ("egg", "eggs"), ("box", "boxes"), ("song", "songs"),
    ("file", "files"), ("stamp", "stamps"), ("seed", "seeds"), ("player", "players"), ("map", "maps"),
    ("cup", "cups"), ("bike", "bikes"), ("photo", "photos"), ("plane", "planes"), ("record", "records"),
)
SLOT = re.compile(r"\{(\w+)\}")


def frame_vocabulary() -> set[str]:
    """The lowercased words the frames and nouns write themselves (never held out of training)."""
    text = " ".join(SLOT.sub(" ", f) for frames in FRAMES.values() for f in frames)
    return {w.lower() for w in re.findall(r"[^\W\d_]+", text)} | {w for pair in THINGS for w in pair}
