"""The operator's TOML config: ``$VAK_CONFIG``, else ``$XDG_CONFIG_HOME/vak/config.toml`` (~/.config).

Only the sections vak-context reads are validated here; other tables are kept in ``raw`` for the
components that own them. Today::

    [probe]
    hosted = "off"    # "off" (default): hosted models get metadata-only profiles, tightened by
                      #   feedback; "full": hosted models run the probe ladder too (it costs tokens)

A missing default file means the defaults. A ``VAK_CONFIG`` that names a missing file, a file that is
not TOML, or a value out of range is a ``ConfigError`` that names the file, the key and the fix.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from vak_context.errors import ConfigError

HostedProbe = Literal["off", "full"]
HOSTED_CHOICES: tuple[str, ...] = ("off", "full")
PROBE_KEYS = frozenset({"hosted"})


@dataclass(frozen=True)
class ProbeConfig:
    hosted: HostedProbe = "off"


@dataclass(frozen=True)
class VakConfig:
    probe: ProbeConfig = ProbeConfig()
    path: Path | None = None  # the file it came from; None for defaults
    raw: dict[str, Any] = field(default_factory=dict)


def config_path(env: Mapping[str, str] | None = None) -> tuple[Path, bool]:
    """(path, explicit): ``VAK_CONFIG`` when set (explicit), else the XDG default."""
    env = os.environ if env is None else env
    if env.get("VAK_CONFIG"):
        return Path(env["VAK_CONFIG"]).expanduser(), True
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else Path.home() / ".config"
    return base / "vak" / "config.toml", False


def load_config(path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None) -> VakConfig:
    """Read and validate the config. Defaults when no file exists at the default location."""
    if path is not None:
        file, explicit = Path(path), True
    else:
        file, explicit = config_path(env)
    if not file.exists():
        if explicit:
            raise ConfigError(
                f"config file {file} does not exist (named by VAK_CONFIG or the caller). "
                "Create it, or unset VAK_CONFIG to use the defaults."
            )
        return VakConfig()
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file} is not valid TOML: {exc}. Fix the line it names.") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read config file {file}: {exc}. Check its permissions and encoding.") from exc
    return parse_config(data, path=file)


def parse_config(data: Mapping[str, Any], *, path: Path | None = None) -> VakConfig:
    where = str(path) if path else "config"
    probe_table = data.get("probe", {})
    if not isinstance(probe_table, dict):
        raise ConfigError(f"{where}: [probe] must be a table, e.g.\n[probe]\nhosted = \"off\"")
    unknown = sorted(set(probe_table) - PROBE_KEYS)
    if unknown:
        raise ConfigError(
            f"{where}: unknown key(s) {unknown} in [probe]; it accepts {sorted(PROBE_KEYS)}. Remove or rename them."
        )
    hosted = probe_table.get("hosted", "off")
    if hosted not in HOSTED_CHOICES:
        raise ConfigError(
            f"{where}: [probe] hosted = {hosted!r} is not one of {list(HOSTED_CHOICES)}. Use \"full\" to run the "
            "probe ladder on hosted models (it costs tokens), or \"off\" for metadata-only profiles."
        )
    return VakConfig(probe=ProbeConfig(hosted=hosted), path=path, raw=dict(data))


def mcp_server_names(config: VakConfig) -> tuple[str, ...]:
    """The MCP server names the operator admitted: ``[mcp.servers.<name>]`` tables, or ``[mcp] servers =
    ["name", ...]``. They are vendor names: no production code may route on them (spec §9)."""
    mcp = config.raw.get("mcp")
    servers = mcp.get("servers") if isinstance(mcp, Mapping) else None
    if isinstance(servers, Mapping):
        return tuple(sorted(str(k) for k in servers))
    if isinstance(servers, list):
        return tuple(sorted(str(s) for s in servers))
    return ()
