"""What the configuration error tests share: the lines of the error a configuration raises."""

from __future__ import annotations

from pathlib import Path

import pytest

from toolwatch.config import ConfigError, load_config


def error_lines(path: Path | None, overrides: dict[str, object]) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        load_config(path, overrides)
    return str(refused.value).splitlines()
