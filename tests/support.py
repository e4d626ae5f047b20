"""Paths and helpers the tests share (imported by name; conftest.py only holds fixtures)."""

from __future__ import annotations

import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
import zlib
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLES = REPO / "samples"
# Tiny random-weight encoders of every family, with their reference outputs (make_family_fixtures.py).
FAMILY_FIXTURES = REPO / "tests" / "fixtures" / "families"
# ../shared beside the clone, or DOCEMBED_SHARED where the shared folder lives elsewhere (a git worktree).
SHARED = Path(os.environ.get("DOCEMBED_SHARED") or REPO.parent / "shared")
CORPUS = SHARED / "corpus" / "py-pdf-sample-files"


def wait_for_idle_cluster(timeout: float = 60) -> None:
    """Until the connected Ray's CPUs and accelerators are all free again: a finished or
    killed job's actors are released asynchronously, after its driver has moved on."""
    import ray

    deadline = time.time() + timeout
    while time.time() < deadline:
        total, free = ray.cluster_resources(), ray.available_resources()
        if all(free.get(kind, 0) >= total[kind] for kind in ("CPU", "GPU", "TPU") if kind in total):
            return
        time.sleep(0.2)
    raise AssertionError(f"the cluster's resources are still held: {ray.available_resources()}")


# What a run records of itself in `_docembed.json`, for tests of the output's bookkeeping without a run.
MANIFEST = {
    "fingerprint": "f" * 16,
    "model": "m",
    "model_fingerprint": "mf",
    "max_tokens": 10,
    "overlap": 2,
    "dtype": "float32",
    "inputs": ["/d/"],
}


def keeping(markers: list):
    """A ledger's `committed` (`Ledger.add`) that keeps each marker as it lands."""
    return lambda marker, done: markers.append(marker)


def write_after(monkeypatch, wait) -> None:
    """Each write of this process's files (`write_file`: the output's parts and markers) once `wait()` returns."""
    from pipeline.io import filesystems

    real_write = filesystems.write_file

    def write_file(*args):
        wait()
        real_write(*args)

    monkeypatch.setattr(filesystems, "write_file", write_file)


def listing(uris: list[str], size: int = 1):
    """Listing entries (uri, kind, size) of files not on disk, as `pipeline.io.listing.list_pages` gives them."""
    import pyarrow as pa

    from pipeline.kinds import kind_of

    return pa.table({"uri": uris, "kind": [kind_of(u) for u in uris], "size": pa.array([size] * len(uris), pa.int64())})


def recorded_members(fs, root: str) -> dict[str, set[str]]:
    """Each commit group's members, as an output's recorded listing (`_inputs/`) names them."""
    import pyarrow.parquet as pq

    table = pq.read_table(f"{root}/_inputs", filesystem=fs, columns=["uri", "group"])
    members: dict[str, set[str]] = {}
    for uri, group in zip(table.column("uri").to_pylist(), table.column("group").to_pylist()):
        members.setdefault(group, set()).add(uri)
    return members


def text_files(n: int, prefix: str = "/d/f") -> list[str]:
    """The URIs of `n` text files."""
    return [f"{prefix}{i:03d}.txt" for i in range(n)]


def run_on_cpu_devices(script: Path, out: Path, devices: int, timeout: float) -> dict:
    """Runs `python script OUT` in a child process that sees `devices` CPU devices and returns the
    JSON it wrote to OUT. XLA makes simulated devices only before JAX starts, and this process has
    started it with one."""
    env = {
        **os.environ,
        "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
        "JAX_PLATFORMS": "cpu",
        "JAX_DISABLE_MOST_OPTIMIZATIONS": "1",  # as the kernel tests compile (tests/kernels/conftest.py)
    }
    child = subprocess.run(
        [sys.executable, str(script), str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert child.returncode == 0, child.stderr[-4000:]
    return json.loads(out.read_text())


# bge-m3's config.json: XLM-RoBERTa large, 568M parameters.
XLM_ROBERTA_LARGE = {
    "model_type": "xlm-roberta",
    "vocab_size": 250002,
    "hidden_size": 1024,
    "num_hidden_layers": 24,
    "num_attention_heads": 16,
    "intermediate_size": 4096,
    "max_position_embeddings": 8194,
    "type_vocab_size": 1,
    "pad_token_id": 1,
}


def bert_tensor_shapes(config: dict, prefix: str = "") -> dict[str, tuple[int, ...]]:
    """The tensors `BertModel` (and `XLMRobertaModel`) saves for a config.json, name -> shape, without the pooler."""
    D, F, L = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    shapes = {
        "embeddings.word_embeddings.weight": (config["vocab_size"], D),
        "embeddings.position_embeddings.weight": (config["max_position_embeddings"], D),
        "embeddings.token_type_embeddings.weight": (config["type_vocab_size"], D),
        "embeddings.LayerNorm.weight": (D,),
        "embeddings.LayerNorm.bias": (D,),
    }
    linears = {
        "attention.self.query": (D, D),
        "attention.self.key": (D, D),
        "attention.self.value": (D, D),
        "attention.output.dense": (D, D),
        "intermediate.dense": (F, D),
        "output.dense": (D, F),
        "attention.output.LayerNorm": (D,),
        "output.LayerNorm": (D,),
    }
    for i in range(L):
        for module, shape in linears.items():
            shapes[f"encoder.layer.{i}.{module}.weight"] = shape
            shapes[f"encoder.layer.{i}.{module}.bias"] = shape[:1]
    return {prefix + name: shape for name, shape in shapes.items()}


def write_zero_safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> int:
    """A valid float32 safetensors file of zeros, written sparse: its size costs neither disk nor
    time nor memory, as only its header is written. Returns the size of its tensors in bytes."""
    header, offset = {}, 0
    for name, shape in shapes.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little") + encoded)
        f.truncate(8 + len(encoded) + offset)
    return offset


def copy_default_model(tmp_path: Path) -> Path:
    """A copy of the bundled default model's directory, to edit."""
    from pipeline.encode import model_location

    dst = tmp_path / "model"
    shutil.copytree(model_location.default_model_dir(), dst)
    return dst


def edit_json(path: Path, name: str, change) -> None:
    """Rewrites the JSON file `path/name` as `change` (its value -> the new value; {} where the file is absent)."""
    file = path / name
    file.write_text(json.dumps(change(json.loads(file.read_text()) if file.exists() else {})))


_MEASURED = """
import json, sys, time

def status(key):
    with open("/proc/self/status") as f:
        return 1024 * int(next(line for line in f if line.startswith(key + ":")).split()[1])

def measured(work):
    rss_before, wall, cpu = status("VmRSS"), time.perf_counter(), time.process_time()
    work()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    print("MEASURED", json.dumps({"rss_before": rss_before, "peak": status("VmHWM"), "wall_s": wall, "cpu_s": cpu}))
"""


def measure_in_child(code: str, *args: str, timeout: float = 600) -> dict:
    """Runs `code` with `args` in a fresh Python process at the repository root. `code` calls
    `measured(work)` once; returned is what that measured of `work()`: rss_before (VmRSS just before,
    bytes), peak (VmHWM after: the process's peak RSS), wall_s and cpu_s.

    The peak is VmHWM, not ru_maxrss: a child's ru_maxrss starts at its parent's peak (Linux carries
    the old memory map's high-water mark over an exec, and subprocess starts children with vfork).
    """
    result = subprocess.run(
        [sys.executable, "-c", _MEASURED + code, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )
    line = next((out for out in result.stdout.splitlines() if out.startswith("MEASURED ")), None)
    if result.returncode or line is None:
        raise RuntimeError(f"the measured child failed: {result.stderr[-4000:]}")
    return json.loads(line.split(" ", 1)[1])


def encrypt(pdf: bytes, *, user_password: str, owner_password: str) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf)))
    writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def start_local_ray() -> str:
    """Starts a Ray of this process's own ("local": even while other test runs keep theirs on this machine) with
    2 CPUs, no dashboard, and its workers' output left in their log files; returns its GCS address."""
    import ray

    context = ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    return context.address_info["gcs_address"]


def ray_log_files() -> list[Path]:
    """Every file under the connected Ray session's `logs/` (all its nodes', on one machine)."""
    import ray

    # private: no public API gives the connected Ray's session directory (ray.init's context is the caller's fixture's)
    session = ray._private.worker._global_node.get_session_dir_path()
    return [p for p in Path(session, "logs").rglob("*") if p.is_file()]


def terminal_output(controller: int) -> bytes:
    """All that is shown on the pseudo-terminal of `controller` until every process holding its other end closes it."""
    shown = b""
    while True:
        try:
            chunk = os.read(controller, 65536)
        except OSError:  # the last holder closed it
            return shown
        if not chunk:
            return shown
        shown += chunk


def assert_no_secrets(secrets: list[str], blobs: Iterable[tuple[str, bytes]]) -> int:
    """Fails naming the first blob (name, bytes) that holds any of `secrets`; returns how many were searched."""
    searched = 0
    for name, data in blobs:
        leaked = [s for s in secrets if s.encode() in data]
        assert not leaked, f"{name} holds {leaked}"
        searched += 1
    return searched


def tiny_notes(n: int) -> list[dict]:
    """Document rows (DOC_SCHEMA) of the tiny files of bench/scale.py: one ~17-token note each."""
    return [
        {"doc_id": f"n{i}", "kind": "text", "pages": [f"Note {i}: a short document about item {i * 7 % 1013}."]}
        for i in range(n)
    ]


def execute_notebook(path: Path):
    """Runs a notebook top to bottom where Jupyter would (in its folder); returns it with its outputs.

    Needs the `kernel_env` fixture; any cell that raises fails the caller with its traceback.
    """
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}).execute()
    return nb


def notebook_outputs_text(nb) -> str:
    """Everything an executed notebook's cells printed or displayed as text."""
    parts = []
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.extend(str(v) for k, v in output.get("data", {}).items() if k.startswith("text/"))
    return "\n".join(parts)


# --- PDFs written byte by byte, for inputs no PDF library would produce --------


def pdf_file(objects: list[bytes]) -> bytes:
    """A PDF of `objects` (object i+1 is objects[i]; object 1 is the catalog) with a correct xref table."""
    out = bytearray(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def stream(data: bytes, extra: bytes = b"") -> bytes:
    return b"<< /Length %d %s >>\nstream\n" % (len(data), extra) + data + b"\nendstream"


_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"


def text_pdf(pages: list[str], *, padding_bytes: int = 0) -> bytes:
    """One page of Helvetica text per string, a line per line; `padding_bytes` of random image data make it big."""
    n = len(pages)
    # 1 catalog, 2 pages, 3 font, 4 image, then (page, content) pairs
    kids = b" ".join(b"%d 0 R" % (5 + 2 * i) for i in range(n))
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, n), _FONT]
    side = max(int(padding_bytes**0.5), 1)
    objects.append(
        stream(
            os.urandom(side * side),
            b"/Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray /BitsPerComponent 8"
            % (side, side),
        )
    )
    for i, text in enumerate(pages):
        draw = b" /Im0 Do" if i == 0 and padding_bytes else b""
        lines = b" T* ".join(b"(%s) Tj" % _escape(line) for line in text.split("\n"))
        content = b"q%s Q BT /F1 11 Tf 14 TL 72 720 Td %s ET" % (draw, lines)
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents %d 0 R "
            b"/Resources << /Font << /F1 3 0 R >> /XObject << /Im0 4 0 R >> >> >>" % (6 + 2 * i)
        )
        objects.append(stream(content))
    return pdf_file(objects)


def _escape(text: str) -> bytes:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")


def page_tree_loop_pdf() -> bytes:
    """A Pages node whose only kid is itself, and a page that is its own parent."""
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [2 0 R 3 0 R] /Count 2 >>",
            b"<< /Type /Page /Parent 3 0 R /MediaBox [0 0 612 792] >>",
        ]
    )


def deeply_nested_pdf(depth: int = 100_000) -> bytes:
    """A page whose resources hold arrays and dictionaries nested `depth` deep."""
    nested = b"[" * depth + b"]" * depth + b" " + b"<< /A " * depth + b">>" * depth
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
            b"/Resources << /Font << /F1 5 0 R >> /Deep %s >> >>" % nested,
            stream(b"BT /F1 11 Tf 72 720 Td (Text beside a deep structure.) Tj ET"),
            _FONT,
        ]
    )


def decompression_bomb_pdf(inflated_bytes: int = 1 << 30) -> bytes:
    """A page whose FlateDecode content stream inflates to `inflated_bytes` of spaces (about 1000:1)."""
    deflate = zlib.compressobj(9)
    block = b" " * (1 << 20)
    packed = b"".join(deflate.compress(block) for _ in range(inflated_bytes // len(block))) + deflate.flush()
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>",
            stream(packed, b"/Filter /FlateDecode"),
        ]
    )


def form_fanout_pdf(fanout: int, pages: int = 1) -> bytes:
    """Pages that draw a form `fanout` times that draws a line `fanout` times: a small file, fanout**2 per page."""
    kids = b" ".join(b"%d 0 R" % (7 + i) for i in range(pages))
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
        b"/Resources << /XObject << /X 4 0 R >> >> >>"
    )
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [%s] /Count %d >>" % (kids, pages),
            stream(b"/X Do " * fanout),
            stream(
                b"/Y Do " * fanout,
                b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /XObject << /Y 5 0 R >> >>",
            ),
            stream(
                b"BT /F1 11 Tf 72 720 Td (Ha!) Tj ET",
                b"/Type /XObject /Subtype /Form /BBox [0 0 612 792] /Resources << /Font << /F1 6 0 R >> >>",
            ),
            _FONT,
        ]
        + [page] * pages
    )


def glyph_codes_pdf(lines: list[tuple[str, int, int, bytes]]) -> bytes:
    """One 400 x 400 page with a line per (font, x, y, string): font "text" is Helvetica; "codes" is Helvetica with no
    encoding, so a code below 32 is a glyph's own code with no Unicode (as TeX's CMEX10 has); "math" names its code 65
    /u1D400, a character above U+FFFF. A line at a negative x lies outside the page."""
    widths = b"/FirstChar 0 /LastChar 255 /Widths [%s]" % b" ".join([b"500"] * 256)
    fonts = {
        "text": b"/BaseFont /Helvetica /Encoding /WinAnsiEncoding",
        "codes": b"/BaseFont /Helvetica " + widths,
        "math": b"/BaseFont /Helvetica /Encoding << /Type /Encoding /Differences [65 /u1D400] >> " + widths,
    }
    names = {font: b"/F%d" % i for i, font in enumerate(fonts)}
    content = b"".join(
        b"BT %s 12 Tf %d %d Td (%s) Tj ET\n" % (names[font], x, y, string) for font, x, y, string in lines
    )
    resources = b" ".join(b"%s %d 0 R" % (names[font], 5 + i) for i, font in enumerate(fonts))
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 400 400] /Contents 4 0 R "
            b"/Resources << /Font << %s >> >> >>" % resources,
            stream(content),
        ]
        + [b"<< /Type /Font /Subtype /Type1 %s >>" % font for font in fonts.values()]
    )


def loaded_modules(modules: str, condition: str) -> str:
    """The modules a fresh interpreter holds, after importing `modules`, for which `condition` on `m` holds."""
    probe = f"import sys, {modules}; print(sorted(m for m in sys.modules if {condition}))"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
