"""The ``panelpack`` command: thin shells over library functions.

Each command parses its options, calls one library function, and prints what it returns.
Our exceptions become one line on stderr and an exit code (0 ok, 1 verification failed,
2 bad input or usage); nothing else is caught, so a real bug still shows its traceback.
"""

from __future__ import annotations

import functools
import json
import logging
import sys

import click

from panelpack import __version__
from panelpack.formats.errors import EXIT_BAD_INPUT, EXIT_VERIFY_FAILED, PanelpackError

log = logging.getLogger("panelpack")


def _fail(message: str, code: int) -> None:
    click.echo(f"panelpack: error: {message}", err=True)
    sys.exit(code)


def command(fn):
    """Map panelpack's exceptions (and Ctrl-C) to a message and an exit code."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except PanelpackError as e:
            _fail(str(e), e.exit_code)
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except BrokenPipeError:  # `panelpack inspect x | head`
            sys.stderr.close()
            sys.exit(0)

    return wrapper


def echo_json(doc) -> None:
    click.echo(json.dumps(doc, indent=2, sort_keys=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="panelpack")
@click.option("-v", "--verbose", count=True, help="More log output (-v info, -vv debug).")
def main(verbose: int) -> None:
    """Convert, repack and verify quantized LLM checkpoints for SME2, NEON and int8 kernels."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)


@main.command()
@click.argument("path", type=click.Path(exists=False, dir_okay=True))
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON document.")
@command
def inspect(path: str, as_json: bool) -> None:
    """Show the architecture, type histogram and tensor table of a GGUF, safetensors file or HF folder."""
    from panelpack.formats import describe

    doc = describe.describe(path)
    if as_json:
        echo_json(doc)
    else:
        click.echo(describe.render(doc))


@main.command()
@click.option("--json", "as_json", is_flag=True, help="Print a machine-readable JSON document.")
@command
def layouts(as_json: bool) -> None:
    """List every layout with its source types and constraints."""
    from panelpack import repack

    doc = repack.describe()
    if as_json:
        echo_json(doc)
        return
    from panelpack.formats.text import table

    rows = []
    for d in doc:
        types = "any" if d.get("any_type") else ", ".join(d["source_types"])
        inv = d.get("invertible")
        if isinstance(inv, dict):
            inv = "yes" if all(inv.values()) else "no: " + ", ".join(k for k, v in inv.items() if not v)
        else:
            inv = "yes" if inv else "no"
        target = ", ".join(f"{k}={v}" for k, v in d.get("target", {}).items())
        rows.append((d["name"], d.get("row_multiple", 1), types, inv, target, d.get("description", "")))
    click.echo(table(rows, ("layout", "N multiple", "source types", "invertible", "target", "description")))


class _TqdmProgress:
    """Progress bar over bytes, with the tensor count as a postfix (stderr, TTY only)."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.bar = None
        self.done = 0

    def start(self, tensors: int, nbytes: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        self.total = tensors
        self.bar = tqdm(total=nbytes, unit="B", unit_scale=True, unit_divisor=1024, desc="convert",
                        file=sys.stderr, dynamic_ncols=True, leave=False)

    def tensor_done(self, name: str, nbytes: int) -> None:
        self.done += 1
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.done}/{self.total} tensors", refresh=False)
            self.bar.update(nbytes)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _install_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so partial output is cleaned up."""
    import signal

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # not the main thread
        pass


@main.command()
@click.argument("source", type=click.Path(exists=False))
@click.option("-o", "--out", "out", type=click.Path(), help="Bundle directory to write (OUT.ppk).")
@click.option("--layout", default="panel64", show_default=True,
              help="panel64 | ggml-x8 | il8-nibble | il8-int8 | rowmajor (see `panelpack layouts`).")
@click.option("--quant", default=None, help="A llama.cpp mix (Q4_K_M, Q5_K_S, Q8_0, ...: see below) or, for HF sources, a type for every 2-D matmul weight (q4_k, q5_k, ...).")
@click.option("--requant", default=None, help="GGUF sources: re-quantize what the layout cannot take (q4_0 | q4_k | q8_0).")
@click.option("--include", multiple=True, metavar="GLOB", help="Only tensors whose name matches (repeatable).")
@click.option("--exclude", multiple=True, metavar="GLOB", help="Skip tensors whose name matches (repeatable).")
@click.option("-j", "--jobs", default=1, show_default=True, type=click.IntRange(1, 64), help="Tensors converted in parallel.")
@click.option("--dry-run", is_flag=True, help="Print the plan and ledger without reading tensor data.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON (for pipelines).")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--pure", is_flag=True, help="With a --quant mix: every quantized tensor gets the mix's default type (llama-quantize --pure).")
@click.option("--tensor-type", "tensor_types", multiple=True, metavar="REGEX=TYPE",
              help="With a --quant mix: tensors whose (llama.cpp) name matches REGEX get TYPE (repeatable; first match wins).")
@click.option("--output-tensor-type", default=None, metavar="TYPE", help="With a --quant mix: the type of output.weight.")
@click.option("--token-embedding-type", default=None, metavar="TYPE", help="With a --quant mix: the type of token_embd.weight.")
@click.option("--leave-output-tensor", is_flag=True, help="With a --quant mix: keep output.weight as stored.")
@click.option("--imatrix", "imatrix", default=None, metavar="FILE",
              help="With a --quant mix: llama.cpp importance matrix (GGUF or legacy .dat) to quantize with.")
@command
def convert(source, out, layout, quant, requant, include, exclude, jobs, dry_run, force, as_json, no_progress,
            pure, tensor_types, output_tensor_type, token_embedding_type, leave_output_tensor, imatrix):
    """Convert a GGUF file or an HF checkpoint into a bundle.

    --quant takes a llama.cpp file type (Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K_S Q3_K_M Q3_K_L
    Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K, any case): each tensor's type is chosen as llama-quantize
    chooses it, GGUF sources included (re-quantized). A plain type (q4_k, q5_k) quantizes every
    2-D matmul weight of an HF source to it.
    """
    from panelpack.convert import convert as convert_fn
    from panelpack.convert import mixes, report

    if out is None and not dry_run:
        raise click.UsageError("missing -o/--out (or use --dry-run)")
    _install_sigterm()
    mix_options = mixes.Options(pure=pure, tensor_types=tuple(mixes.parse_tensor_type(s) for s in tensor_types),
                                output_tensor_type=output_tensor_type, token_embedding_type=token_embedding_type,
                                leave_output_tensor=leave_output_tensor, imatrix=imatrix)
    progress = _TqdmProgress(enabled=not (as_json or no_progress or dry_run) and sys.stderr.isatty())
    result = convert_fn(source, out, layout=layout, quant=quant, requant=requant, include=include,
                        exclude=exclude, jobs=jobs, dry_run=dry_run, force=force, progress=progress,
                        mix_options=mix_options)
    for w in result.plan.warnings:
        click.echo(f"warning: {w}", err=True)
    if as_json:
        echo_json(result.to_json())
    else:
        click.echo(report.render_result(result))


@main.command()
@click.argument("bundle", type=click.Path(exists=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="GGUF file to write.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@command
def export(bundle, out, force, as_json):
    """Rebuild the source GGUF, byte for byte, from a GGUF-sourced bundle."""
    from panelpack.convert.export import export_gguf

    res = export_gguf(bundle, out, force=force)
    if as_json:
        echo_json(res.to_json())
    else:
        click.echo(res.render())


@main.command()
@click.argument("bundle", type=click.Path(exists=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Archive to write (FILE.ppk.tar.zst).")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@click.option("--level", default=9, show_default=True, type=click.IntRange(1, 22), help="zstd level.")
@click.option("--threads", default=-1, show_default=True, type=int, help="zstd worker threads (-1: all cores).")
@command
def pack(bundle, out, force, level, threads):
    """Write a bundle as a deterministic .ppk.tar.zst archive."""
    from panelpack.formats import archive

    _install_sigterm()
    r = archive.pack(bundle, out, force=force, level=level, threads=threads)
    click.echo(f"packed {r.files} files, {r.bytes_in:,} bytes -> {r.path} ({r.bytes_out:,} bytes)")


@main.command()
@click.argument("archive_path", metavar="ARCHIVE", type=click.Path(exists=False))
@click.option("-o", "--out", "out", required=True, type=click.Path(), help="Bundle directory to restore.")
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
@command
def unpack(archive_path, out, force):
    """Restore a bundle directory from a .ppk.tar.zst archive."""
    from panelpack.formats import archive

    _install_sigterm()
    r = archive.unpack(archive_path, out, force=force)
    click.echo(f"unpacked {r.files} files, {r.bytes_in:,} bytes -> {r.path}")


@main.command()
@click.argument("bundle", type=click.Path(exists=False))
@click.option("--level", type=click.Choice(["structure", "lossless", "agreement", "all"]), default="all",
              show_default=True, help="What to prove (structure always runs).")
@click.option("--json", "report_path", type=click.Path(), default=None, metavar="REPORT",
              help="Also write the full report as JSON to REPORT ('-' for stdout instead of the table).")
@click.option("--seed", default=0, show_default=True, type=int, help="Seed of the random activations.")
@click.option("--sample", default=2, show_default=True, type=click.IntRange(0, None),
              help="Super-blocks (64 rows) per tensor run through the emulated leaves (0: all).")
@click.option("--svl-bits", default=512, type=click.Choice(["128", "256", "512", "1024", "2048"]), hidden=True,
              help="Read panels as a runtime with this streaming vector length would (negative tests).")
@click.option("--tensor", "names", multiple=True, metavar="NAME", help="Only these tensors (repeatable).")
@command
def verify(bundle, level, report_path, seed, sample, svl_bits, names):
    """Prove a bundle (or .ppk.tar.zst): structure, lossless, agreement; print the dispatch ledger.

    Exit 0 when every tensor agrees, 1 on any mismatch, missing file, bad checksum or
    unexplained fallback, 2 on bad input.
    """
    from panelpack.verify import bundle_check

    rep = bundle_check.verify(bundle, level=level, seed=seed, sample=sample, svl_bits=int(svl_bits),
                              names=list(names) or None)
    if report_path == "-":
        echo_json(rep.to_json())
    else:
        click.echo(rep.render())
        if report_path:
            with open(report_path, "w", encoding="utf-8") as f:
                json.dump(rep.to_json(), f, indent=2)
    if not rep.ok:
        sys.exit(EXIT_VERIFY_FAILED)


@main.command()
@click.option("-o", "--out", "out", default="tiny-llama.ppk", show_default=True, type=click.Path(),
              help="Bundle directory to write (replaced if it exists).")
@click.option("--source", "source", default=None, type=click.Path(),
              help="Where to write the generated HF checkpoint (default: a temporary folder).")
@click.option("--layout", default="panel64", show_default=True)
@click.option("--quant", default="q4_k", show_default=True)
@click.option("--verify", "verify_level", default="structure", show_default=True,
              type=click.Choice(("none", "structure", "lossless", "agreement", "all")),
              help="Verification level to run on the bundle afterwards. 'all' adds the emulated SME2 and "
                   "NEON leaves and the compiled kernels; the first run on a machine compiles them (tens of "
                   "seconds), later runs take about a second.")
@click.option("--no-verify", is_flag=True, help="Same as --verify none.")
@command
def demo(out, source, layout, quant, verify_level, no_verify):
    """The embedded default: generate a tiny Llama, convert it, print the ledger, check it."""
    import tempfile

    from panelpack.convert import convert as convert_fn
    from panelpack.convert import report
    from panelpack.convert.example import write_tiny_llama

    with tempfile.TemporaryDirectory(prefix="panelpack-demo-") as tmp:
        src = write_tiny_llama(source or tmp + "/tiny-llama-hf")
        click.echo(f"generated {src} (tiny Llama-shaped checkpoint, bf16)")
        result = convert_fn(src, out, layout=layout, quant=quant, force=True)
    click.echo(report.render_result(result))
    if no_verify or verify_level == "none":
        return
    from panelpack.verify import bundle_check

    rep = bundle_check.verify(out, level=verify_level)
    click.echo(rep.render())
    if not rep.ok:
        sys.exit(EXIT_VERIFY_FAILED)
    if verify_level != "all":
        click.echo(f"next: panelpack verify {out} --level all   (integer partials of the emulated SME2/NEON "
                   "leaves and compiled kernels against the standard dispatch)")


def run() -> None:  # pragma: no cover - console entry for tooling that wants a plain function
    main(prog_name="panelpack")


if __name__ == "__main__":  # pragma: no cover
    main()

__all__ = ["main", "command", "EXIT_BAD_INPUT"]
