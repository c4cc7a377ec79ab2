"""Job settings (:class:`GICSettings`): every setting declared once
(:mod:`gic_runtime.config.fields`) and the validated, frozen settings object loaded
from arguments, environment and file (:mod:`gic_runtime.config.settings`). Import the
names from here.
"""

from gic_runtime.config.settings import ACCEPTED, DRIVER_PID_FILE_ENV, GICSettings
from gic_runtime.config_sources import CONFIG_FILE_ENV, ENV_PREFIX, env_var
from gic_runtime.local_dirs import default_local_dir

__all__ = [
    "ACCEPTED",
    "CONFIG_FILE_ENV",
    "DRIVER_PID_FILE_ENV",
    "ENV_PREFIX",
    "GICSettings",
    "default_local_dir",
    "env_var",
]
