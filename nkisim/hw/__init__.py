"""Hardware generations (trn1/inf2, trn2, trn3, and what-if files) as data."""

from nkisim.hw.engines import QUEUED_ENGINES, Engine
from nkisim.hw.model import DEFAULT_TARGET, Capabilities, HwConfig, generation_names, load_target

__all__ = ["DEFAULT_TARGET", "QUEUED_ENGINES", "Capabilities", "Engine", "HwConfig", "generation_names", "load_target"]
