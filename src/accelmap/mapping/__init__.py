"""How: a mapping is an ordered loop nest bound to levels, plus bypass choices."""

from accelmap.mapping.forms import format_text, mapping_from_yaml, mapping_to_yaml, parse_text
from accelmap.mapping.loopnest import Loop, Mapping
from accelmap.mapping.validate import capacity_usage, check_capacity, check_structure, validate

__all__ = ["Loop", "Mapping", "format_text", "parse_text", "mapping_to_yaml", "mapping_from_yaml",
           "validate", "check_structure", "check_capacity", "capacity_usage"]
