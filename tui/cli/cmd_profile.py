"""``disagg-tui profile new|list|show``: profiles derived from model folders and the Hugging Face cache.

``profile new --from PATH|REPO [-o FILE]`` writes the profile derived from a model folder (or a repo id of the
HF cache) as commented YAML with the shipped profiles' schema; ``profile list`` shows every launchable model with
its source (shipped, operator, hf-cache, folder) and what keeps it from launching; ``profile show REF`` prints the
resolved profile with the sizes the planner and the simulator use.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tui.cli.context import CliContext, add_global_options
from tui.core import paths, safewrite
from tui.core.errors import EXIT_OK, InputError
from tui.core.models import ModelProfile, parse_model_profile
from tui.core.models.modelsrc import MODEL_DIRS_ENV, derive_ref, list_models
from tui.core.models.profile_yaml import profile_yaml
from tui.core.safeio import shown
from tui.core.yamlio import dump, load_file


def register(sub: Any) -> None:
    p = sub.add_parser("profile", help="derive, list and show model profiles (model folders, the HF cache)",
                       description="Model profiles: the shipped ones, your own, and those derived from model "
                                   "folders or the Hugging Face cache (read offline; nothing is downloaded).")
    psub = p.add_subparsers(dest="profile_command", metavar="ACTION", parser_class=type(p))
    psub.required = True

    new = psub.add_parser("new", help="write the profile derived from a model folder or a cached repo as YAML",
                          description="Derive a profile from a model folder (config.json, safetensors index or "
                                      "headers, tokenizer) or a repo id ORG/NAME of the Hugging Face cache, and "
                                      "write it as commented YAML to edit (stdout without -o or --save).")
    new.add_argument("--from", dest="from_ref", required=True, metavar="PATH|REPO",
                     help="a model folder, its config.json, or ORG/NAME[@REV] in the HF cache")
    out = new.add_mutually_exclusive_group()
    out.add_argument("-o", "--output", type=Path, metavar="FILE", help="write the profile to FILE")
    out.add_argument("--save", action="store_true",
                     help="write it to your profiles folder (models/<id>.yaml), where --model ID finds it")
    new.add_argument("--id", dest="profile_id", metavar="ID", help="profile id (default: from the model's name)")
    new.add_argument("--force", action="store_true", help="overwrite FILE if it exists")
    add_global_options(new)
    new.set_defaults(handler=run_new)

    ls = psub.add_parser("list", help="every launchable model: shipped, yours, HF cache, model folders",
                         description="Every model --model can take, with its source and path: shipped and operator "
                                     f"profiles, the Hugging Face cache, and model folders under ${MODEL_DIRS_ENV} "
                                     "(and --dir).")
    ls.add_argument("--dir", action="append", default=[], type=Path, metavar="DIR",
                    help="also list the model folders under DIR (repeatable)")
    ls.add_argument("--json", action="store_true")
    add_global_options(ls)
    ls.set_defaults(handler=run_list)

    show = psub.add_parser("show", help="the resolved profile of a model (id, file, folder or repo id)")
    show.add_argument("ref", metavar="ID|FILE|PATH|REPO")
    show.add_argument("--json", action="store_true")
    add_global_options(show)
    show.set_defaults(handler=run_show)


def run_new(args: argparse.Namespace, ctx: CliContext) -> int:
    from tui.core.models.modeldir import slug

    derived = derive_ref(args.from_ref, ctx.catalog)
    if derived is None:
        raise InputError("not a model folder, a config.json or a repo id ORG/NAME of the Hugging Face cache",
                         field="--from")
    if args.profile_id:
        pid = slug(args.profile_id)
        if pid != args.profile_id:
            raise InputError(f"ids are lowercase letters, digits, '.', '-' or '_' (like {pid!r})", field="--id")
        derived.data["id"] = pid
    text = profile_yaml(derived)
    target: Path | None = args.output
    if args.save:
        target = paths.user_profiles_dir() / "models" / f"{derived.data['id']}.yaml"
    if target is None:
        ctx.out.write(text)
        ctx.out.flush()
    else:
        if target.exists() and not args.force:
            raise InputError("exists; give --force to overwrite it", file=target, field="-o")
        try:
            root = paths.root_for(target)
            if root is not None:  # the config folder: checked, whole or not at all, never through a link
                safewrite.write_atomic(target, text, root=root)
            else:  # a file the operator named (-o): whole, and never through a link a teammate planted there
                target.parent.mkdir(parents=True, exist_ok=True)
                safewrite.write_atomic(target, text, mode=0o644)
        except OSError as exc:
            raise InputError(f"cannot write: {exc.strerror or exc}", file=target) from None
    problem = derived.problem()
    where = str(target) if target is not None else "the profile"
    if problem is not None:
        ctx.warn(f"{where}: {problem}: set {', '.join(name for name, _ in derived.missing)} before use")
    elif target is not None:
        back = parse_model_profile(load_file(target), target)  # strict: what was written loads back
        ctx.err.write(f"wrote {target}: profile {back.id} ({_sizes(back)}); use --model "
                      f"{back.id if args.save else target}\n")
    for w in derived.warnings:
        ctx.warn(w)
    return EXIT_OK


def _sizes(p: ModelProfile) -> str:
    kv = p.kv_bytes_per_token()
    return (f"{p.family}, {p.attention} attention, {p.quantization}, weights {p.weights_gib:.2f} GiB, "
            f"KV {kv / 1024:.0f} KiB/token")


def run_list(args: argparse.Namespace, ctx: CliContext) -> int:
    entries = list_models(ctx.catalog, extra_dirs=args.dir)
    if args.json:
        ctx.print_json({"models": [e.to_dict() for e in entries]})
        return EXIT_OK
    if not entries:
        ctx.print("no models")
        return EXIT_OK
    wid = max(len(e.id) for e in entries)
    ctx.print(f"{'ID':<{wid}}  {'SOURCE':<8}  {'MODEL':<40}  PATH")
    for e in entries:
        ref = e.ref if e.source in ("hf-cache", "folder") else e.title
        ctx.print(f"{e.id:<{wid}}  {e.source:<8}  {shown(ref)[:40]:<40}  {shown(e.path, 300)}")
        if e.problem:
            ctx.print(f"{'':<{wid}}  ! {shown(e.problem, 400)}")
    bad = sum(1 for e in entries if e.problem)
    ctx.print(f"{len(entries)} models" + (f", {bad} with a problem" if bad else ""))
    return EXIT_OK


def run_show(args: argparse.Namespace, ctx: CliContext) -> int:
    prof = ctx.catalog.model(args.ref)
    data = prof.to_dict()
    sizes = {"kv_bytes_per_token": prof.kv_bytes_per_token(), "weights_gib": prof.weights_gib,
             "min_compute_capability": prof.min_compute_capability}
    if args.json:
        ctx.print_json({"profile": data, "source": prof.source, "sizes": sizes, "warnings": list(prof.warnings)})
        return EXIT_OK
    ctx.print(f"# {prof.source}")
    ctx.print(f"# {_sizes(prof)}; KV {prof.kv_bytes_per_token():,.0f} bytes per token "
              f"({prof.shape.full_attention_layers} KV layers x {prof.shape.num_kv_heads} KV heads x "
              f"{prof.shape.head_dim} x {1 if prof.kv_cache_dtype == 'fp8' else 2} bytes x 2)")
    ctx.print(dump(data).rstrip())
    for w in prof.warnings:
        ctx.warn(w)
    return EXIT_OK
