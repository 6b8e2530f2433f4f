"""Hardware generations (trn1/inf2, trn2, trn3) as data."""

from nkisim.hw.engines import QUEUED_ENGINES, Engine
from nkisim.hw.model import DEFAULT_TARGET, HwConfig, generation_names, load_target

__all__ = ["DEFAULT_TARGET", "QUEUED_ENGINES", "Engine", "HwConfig", "generation_names", "load_target"]
