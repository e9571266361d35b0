"""shardsafe.titan: torchtitan's checkpoint configuration, read as torchtitan
reads it, as the config of a shardsafe.CheckpointManager.

    from shardsafe import CheckpointManager, titan
    cfg = titan.load_toml("train_configs/llama3_8b.toml",
                          args=["--checkpoint.enable", "--checkpoint.interval", "100"])
    m = CheckpointManager(model, optimizer, config=cfg)

load_toml() reads the `[checkpoint]` section of a torchtitan TOML job
config (Python's tomllib), with `dump_folder` (`[job]` or top level) and
`hf_assets_path` (`[model]` or top level), then applies torchtitan-style
command-line overrides.  from_torchtitan() takes the same fields as a dict
(the keyword arguments of torchtitan's CheckpointManager.Config(...)).
Both return a dict of shardsafe config fields (README.md, "Configuration
fields"): torchtitan's names translated, torchtitan's defaults where they
differ from shardsafe's (DEFAULTS below; docs/checkpoint.md, "torchtitan's
TOML"), any other key passed through as a shardsafe field (checked, with
"did you mean", when the manager is created).  Other sections of the file
and other arguments are the trainer's and are not read here.
"""

import os
import tomllib

from ._errors import InvalidArgumentError

__all__ = ["DEFAULTS", "from_torchtitan", "load_toml", "parse_args"]

# torchtitan's CheckpointManager.Config defaults (torchtitan main, 2025)
# where they differ from shardsafe's (shs_config_init).
DEFAULTS = {
    "enable": False,               # shardsafe: true
    "folder": "checkpoint",        # joined to dump_folder; shardsafe: save_path ""
    "interval": 500,               # shardsafe: save_interleaved_steps 1000
    "last_save_model_only": True,  # shardsafe: false
    "export_dtype": "float32",     # shardsafe: "" (as saved)
    "keep_latest_k": 10,           # shardsafe: 0 (save_max 5 applies)
}
DUMP_FOLDER = "./torchtitan/outputs"  # torchtitan's default dump_folder

# torchtitan's [checkpoint] fields: name -> kind (b bool, i int, s str,
# l list); the ones not in DEFAULTS default as in shardsafe.
FIELDS = {
    "enable": "b", "enable_checkpoint": "b", "folder": "s", "interval": "i",
    "initial_load_path": "s", "initial_load_model_only": "b", "initial_load_in_hf": "b",
    "initial_load_in_hf_quantized": "b", "last_save_model_only": "b", "last_save_in_hf": "b",
    "export_dtype": "s", "async_mode": "s", "keep_latest_k": "i", "load_step": "i",
    "exclude_from_loading": "l", "enable_first_step_checkpoint": "b",
    "create_seed_checkpoint": "b", "load_only": "b", "enable_ft_dataloader_checkpoints": "b",
}
# exclude_from_loading items: torchtitan's older spelling
_EXCLUDE_NAMES = {"data_loader": "dataloader"}


def _bool(where, v):
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "1", "yes", "false", "0", "no"):
        return v.lower() in ("true", "1", "yes")
    raise InvalidArgumentError(f"{where}: expected a boolean, got {v!r}")


def _int(where, v):
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise InvalidArgumentError(f"{where}: expected an integer, got {v!r}")
    try:
        return int(v)
    except ValueError:
        raise InvalidArgumentError(f"{where}: expected an integer, got {v!r}") from None


def _items(where, v):
    if isinstance(v, str):
        v = [x for x in v.split(",") if x.strip()]
    if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
        raise InvalidArgumentError(f"{where}: expected a list of names, got {v!r}")
    return [_EXCLUDE_NAMES.get(x.strip(), x.strip()) for x in v]


def from_torchtitan(checkpoint=None, *, dump_folder=None, hf_assets_path=None, where="checkpoint"):
    """torchtitan's [checkpoint] fields (a dict, or None for all defaults)
    as shardsafe config fields.  dump_folder: torchtitan's (default
    ./torchtitan/outputs); save_path is dump_folder/folder, as torchtitan
    puts its checkpoints.  hf_assets_path: torchtitan's fallback for
    initial_load_path with initial_load_in_hf."""
    section = dict(checkpoint or {})
    if "enable" in section and "enable_checkpoint" in section:
        raise InvalidArgumentError(f"{where}: enable and enable_checkpoint (its older name) "
                                   "are both set")
    if "enable_checkpoint" in section:
        section["enable"] = section.pop("enable_checkpoint")
    values = dict(DEFAULTS)
    values.update(section)
    out = {}
    for key, v in values.items():
        kind = FIELDS.get(key)
        w = f"{where}.{key}"
        if kind is None:
            out[key] = v  # a shardsafe field: checked by the manager
        elif kind == "b":
            values[key] = _bool(w, v)
        elif kind == "i":
            values[key] = _int(w, v)
        elif kind == "s":
            if v is not None and not isinstance(v, str):
                raise InvalidArgumentError(f"{w}: expected a string, got {v!r}")
            values[key] = v or ""
        else:
            values[key] = _items(w, v)
    if values.get("initial_load_in_hf_quantized"):
        raise InvalidArgumentError(
            f"{where}.initial_load_in_hf_quantized: quantized Hugging Face weights are not "
            "read by shardsafe.titan; load them dequantized (initial_load_in_hf) or remove the key")
    if values["interval"] < 1:
        raise InvalidArgumentError(f"{where}.interval: expected a positive integer, "
                                   f"got {values['interval']}")
    folder = values["folder"]
    out.update({
        "enable": values["enable"],
        "save_path": os.path.join(DUMP_FOLDER if dump_folder is None else dump_folder, folder)
        if folder else "",
        "save_interleaved_steps": values["interval"],
        "last_save_model_only": values["last_save_model_only"],
        "export_dtype": values["export_dtype"],
        "keep_latest_k": values["keep_latest_k"],
    })
    # TorchFT's per-replica data-loader checkpoints: without TorchFT (none
    # here) torchtitan does nothing with it either
    values.pop("enable_ft_dataloader_checkpoints", None)
    for key in ("initial_load_path", "initial_load_model_only", "initial_load_in_hf",
                "last_save_in_hf", "async_mode", "load_step", "enable_first_step_checkpoint",
                "create_seed_checkpoint", "load_only"):
        if key in values:
            out[key] = values[key]
    if "exclude_from_loading" in values:
        out["exclude_from_loading"] = values["exclude_from_loading"]
    if hf_assets_path:
        out["hf_assets_path"] = hf_assets_path
    return out


def _one_of(doc, path, top, section, key):
    """key at the top level or in [section]; both set is an error."""
    a = doc.get(key)
    sec = doc.get(section)
    b = sec.get(key) if isinstance(sec, dict) else None
    if a is not None and b is not None and a != b:
        raise InvalidArgumentError(f"{path}: {key} is set both at the top level and in "
                                   f"[{section}] ({a!r} vs {b!r})")
    return a if a is not None else b


def parse_args(args, checkpoint=None, dump_folder=None, hf_assets_path=None):
    """Apply torchtitan command-line overrides to a [checkpoint] dict:
    --checkpoint.FIELD VALUE (or =VALUE), --checkpoint.FIELD for true and
    --checkpoint.no-FIELD for false (tyro's booleans), list fields as one
    comma-separated value; --dump_folder / --job.dump_folder and
    --hf_assets_path / --model.hf_assets_path.  Other arguments are the
    trainer's and are skipped.  Returns (checkpoint, dump_folder,
    hf_assets_path)."""
    section = dict(checkpoint or {})
    args = list(args)
    i = 0
    while i < len(args):
        a = args[i]
        i += 1
        if not a.startswith("--"):
            continue
        name, eq, val = a[2:].partition("=")

        def value():
            nonlocal i
            if eq:
                return val
            if i >= len(args):
                raise InvalidArgumentError(f"{a}: needs a value")
            i += 1
            return args[i - 1]
        norm = name.replace("-", "_")
        if norm in ("dump_folder", "job.dump_folder"):
            dump_folder = value()
        elif norm in ("hf_assets_path", "model.hf_assets_path"):
            hf_assets_path = value()
        elif norm.startswith("checkpoint."):
            field = norm[len("checkpoint."):]
            neg = field.startswith("no_") and FIELDS.get(field[3:]) == "b"
            key = field[3:] if neg else field
            if FIELDS.get(key) == "b" and not eq:
                section[key] = not neg
            elif neg:
                raise InvalidArgumentError(f"{a}: --checkpoint.no-{key.replace('_', '-')} "
                                           "takes no value")
            else:
                section[key] = value()
    return section, dump_folder, hf_assets_path


def load_toml(path, args=()):
    """A torchtitan TOML job config's checkpoint settings (and
    command-line overrides `args`) as shardsafe config fields."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise InvalidArgumentError(f"{path}: not valid TOML: {e}") from None
    section = doc.get("checkpoint", {})
    if not isinstance(section, dict):
        raise InvalidArgumentError(f"{path}: [checkpoint] must be a table")
    dump_folder = _one_of(doc, path, None, "job", "dump_folder")
    hf_assets = _one_of(doc, path, None, "model", "hf_assets_path")
    section, dump_folder, hf_assets = parse_args(args, section, dump_folder, hf_assets)
    return from_torchtitan(section, dump_folder=dump_folder, hf_assets_path=hf_assets,
                           where=f"{path}: checkpoint")
