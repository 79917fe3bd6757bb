"""The demo agent's clock: the time in a city it is asked about, from a few dozen large
cities' IANA time zones (the demo model reads the same table to pick the city out of a
message)."""

from __future__ import annotations

import datetime as dt
import re
import string
import unicodedata
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

# A few common cities and their IANA time zones; anything else gets UTC, said plainly.
CITY_ZONES = {
    "amsterdam": "Europe/Amsterdam",
    "athens": "Europe/Athens",
    "auckland": "Pacific/Auckland",
    "bangalore": "Asia/Kolkata",
    "bangkok": "Asia/Bangkok",
    "barcelona": "Europe/Madrid",
    "beijing": "Asia/Shanghai",
    "berlin": "Europe/Berlin",
    "bogota": "America/Bogota",
    "boston": "America/New_York",
    "brussels": "Europe/Brussels",
    "buenos aires": "America/Argentina/Buenos_Aires",
    "cairo": "Africa/Cairo",
    "cape town": "Africa/Johannesburg",
    "chicago": "America/Chicago",
    "copenhagen": "Europe/Copenhagen",
    "delhi": "Asia/Kolkata",
    "denver": "America/Denver",
    "dubai": "Asia/Dubai",
    "dublin": "Europe/Dublin",
    "helsinki": "Europe/Helsinki",
    "hong kong": "Asia/Hong_Kong",
    "honolulu": "Pacific/Honolulu",
    "istanbul": "Europe/Istanbul",
    "jakarta": "Asia/Jakarta",
    "johannesburg": "Africa/Johannesburg",
    "lagos": "Africa/Lagos",
    "lima": "America/Lima",
    "lisbon": "Europe/Lisbon",
    "london": "Europe/London",
    "los angeles": "America/Los_Angeles",
    "madrid": "Europe/Madrid",
    "melbourne": "Australia/Melbourne",
    "mexico city": "America/Mexico_City",
    "montreal": "America/Toronto",
    "moscow": "Europe/Moscow",
    "mumbai": "Asia/Kolkata",
    "nairobi": "Africa/Nairobi",
    "new york": "America/New_York",
    "oslo": "Europe/Oslo",
    "paris": "Europe/Paris",
    "prague": "Europe/Prague",
    "reykjavik": "Atlantic/Reykjavik",
    "rome": "Europe/Rome",
    "san francisco": "America/Los_Angeles",
    "santiago": "America/Santiago",
    "sao paulo": "America/Sao_Paulo",
    "seattle": "America/Los_Angeles",
    "seoul": "Asia/Seoul",
    "shanghai": "Asia/Shanghai",
    "singapore": "Asia/Singapore",
    "stockholm": "Europe/Stockholm",
    "sydney": "Australia/Sydney",
    "tokyo": "Asia/Tokyo",
    "toronto": "America/Toronto",
    "vancouver": "America/Vancouver",
    "vienna": "Europe/Vienna",
    "warsaw": "Europe/Warsaw",
    "zurich": "Europe/Zurich",
}
UTC_NAMES = {"", "utc", "gmt", "z", "zulu"}


def city_key(city: str) -> str:
    """`São Paulo!` -> `sao paulo`: lower case, accents and punctuation dropped."""
    plain = unicodedata.normalize("NFKD", city).encode("ascii", "ignore").decode()
    return " ".join(re.sub(r"[^a-z ]+", " ", plain.lower()).split())


def time_in(city: str, now: dt.datetime | None = None) -> str:
    now = now or dt.datetime.now(dt.UTC)
    key = city_key(city)
    city = string.capwords(city.strip()) if city.islower() else city.strip()
    utc = now.astimezone(dt.UTC).strftime("%H:%M UTC")
    if key in UTC_NAMES:
        return f"It is {utc}."
    zone_name = CITY_ZONES.get(key)
    try:
        zone = ZoneInfo(zone_name) if zone_name else None
    except ZoneInfoNotFoundError:  # no time zone database on this machine
        zone = None
    if zone is None:
        return (
            f"I only know UTC, not {city}'s time zone: it is {utc}. (The demo clock knows "
            "a few dozen large cities, such as London, New York or Tokyo.)"
        )
    local = now.astimezone(zone)
    offset = local.strftime("%z")
    return (
        f"It is {local:%H:%M} in {city} ({local:%A}; {zone_name}, "
        f"UTC{offset[:3]}:{offset[3:]}); {utc}."
    )
