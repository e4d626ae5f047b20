import re

import pytest

from pipeline.cli import COMMANDS
from pipeline.config import chunks_and_encoder
from pipeline.encode import model_dir
from pipeline.errors import ConfigError
from pipeline.options import OPTIONS, capacity_config, job_config, options_of, parse_job_args, parse_options


def write(tmp_path, text):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    return str(path)


def test_flags_alone_build_the_config_tree():
    cfg = parse_job_args(
        [
            "--input",
            "a",
            "--input",
            "s3://b/c",
            "--output",
            "out",
            "--batch-size",
            "4",
            "--mesh",
            "data=2,model=1",
            "--overwrite",
        ]
    )
    assert cfg.inputs == ("a", "s3://b/c") and cfg.output == "out" and cfg.overwrite
    assert cfg.encoder.batch_size == 4 and cfg.encoder.mesh == (("data", 2), ("model", 1))
    assert cfg.overlap == 32 and cfg.chunking == "boundaries" and cfg.encoder.dtype == "float32"
    assert (cfg.extract.pdf_extractor, cfg.extract.timeout_s, cfg.extract.memory_mib) == ("auto", 120, 2048)


def test_an_input_flag_takes_several_as_a_shells_glob_hands_them_over():
    """`--input docs/*.pdf` unquoted: the shell gives the flag every file; once, the second was refused."""
    cfg = parse_job_args(["--input", "a.pdf", "b.pdf", "--input", "c", "--output", "out"])
    assert cfg.inputs == ("a.pdf", "b.pdf", "c")


def test_an_empty_id_field_names_rows_by_position_an_empty_text_field_is_refused():
    assert parse_job_args(["--input", "a", "--output", "o", "--id-field", ""]).id_field == ""
    with pytest.raises(ConfigError, match="--text-field must not be empty"):
        parse_job_args(["--input", "a", "--output", "o", "--text-field", ""])


def test_yaml_file_with_flags_overriding_it(tmp_path):
    path = write(tmp_path, "input: [docs/a, docs/b]\noutput: out/x\nmax-tokens: 128\noverlap: 8\ndtype: bfloat16\n")
    cfg = parse_job_args(["--config", path, "--overlap", "16", "--input", "only"])
    assert cfg.inputs == ("only",) and cfg.output == "out/x"
    assert (cfg.max_tokens, cfg.overlap, cfg.encoder.dtype) == (128, 16, "bfloat16")
    single = parse_job_args(["--config", write(tmp_path, "input: one\noutput: o\nchunking: window\n")])
    assert single.inputs == ("one",) and single.chunking == "window"
    bounded = parse_job_args(
        [
            "--config",
            write(tmp_path, "input: a\noutput: o\npdf-extractor: pypdf\nextract_timeout: 30\n"),
            "--extract-memory",
            "512",
        ]
    )
    assert (bounded.extract.pdf_extractor, bounded.extract.timeout_s, bounded.extract.memory_mib) == ("pypdf", 30, 512)


@pytest.mark.parametrize(
    "text, message",
    [
        ("input: a\noutput: o\nbatchsize: 3\n", "unknown key 'batchsize'"),
        ("input: a\noutput: o\nsample-docs: 3\n", "unknown key 'sample-docs'"),  # capacity's, not the job's
        ("input: a\noutput: o\noverlap: lots\n", "overlap must be int"),
        ("input: a\noutput: o\noverlap: true\n", "overlap must be int"),
        ("input: a\noutput: o\ndtype: float16\n", "dtype must be one of"),
        ("input: a\noutput: o\nchunking: sentences\n", "chunking must be one of boundaries, window"),
        ("input: a\noutput: o\nmesh: data=two\n", "mesh must look like"),
        ("input: a\noutput: o\npdf-extractor: mupdf\n", "pdf_extractor must be one of auto, pypdf, pdfium"),
        ("input: a\noutput: o\nextract-timeout: 0\n", "--extract-timeout must be in \\[1, 86400\\] s"),
        ("input: a\noutput: o\nextract-memory: 10000000000000\n", "--extract-memory must be in \\[64, 1048576\\] MiB"),
        ("input: a\noutput: o\nencoders: -1\n", "--encoders must be at least 1, got -1"),
        # null is "not given" only where an option has no default of its own (max-tokens: the model's).
        ("input: a\noutput: o\ngroup-size: null\n", "group_size must be int, got None"),
        ("input: [null]\noutput: o\n", "input must be a list of str, got None"),
        ("- just\n- a list\n", "must hold a mapping"),
        ("input: [a\n", "not valid YAML"),
        ("input: a\noutput: o\noverlap: 1\noverlap: 2\n", "not valid YAML: the key 'overlap' is given twice"),
        ("output: o\n", "--input is required"),
    ],
)
def test_bad_config_files_are_refused_clearly(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        parse_job_args(["--config", write(tmp_path, text)])


def test_flags_override_the_files_switches_too(tmp_path):
    path = write(tmp_path, "input: a\noutput: o\nquiet: true\noverwrite: true\n")
    assert (parse_job_args(["--config", path]).verbosity, parse_job_args(["--config", path]).overwrite) == (
        "quiet",
        True,
    )
    assert parse_job_args(["--config", path, "--verbose"]).verbosity == "verbose"  # once: they exclude each other
    assert parse_job_args(["--config", path, "--no-quiet"]).verbosity == "normal"
    assert parse_job_args(["--config", path, "--no-verbose"]).verbosity == "quiet"
    assert not parse_job_args(["--config", path, "--no-overwrite"]).overwrite
    with pytest.raises(ConfigError, match="--quiet and --verbose exclude each other"):
        parse_job_args(["--config", path, "--quiet", "--verbose"])


def test_a_key_given_in_both_spellings_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="'max-tokens' and 'max_tokens' are the same option"):
        parse_job_args(["--config", write(tmp_path, "input: a\noutput: o\nmax-tokens: 9999\nmax_tokens: 64\n")])


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read --config"):
        parse_job_args(["--config", str(tmp_path / "nope.yaml")])
    (tmp_path / "utf16.yaml").write_text("input: a\noutput: o\n", encoding="utf-16")
    with pytest.raises(ConfigError, match="is not UTF-8 text"):
        parse_job_args(["--config", str(tmp_path / "utf16.yaml")])
    assert parse_job_args(["--config", write(tmp_path, "input: a\noutput: o\nmax-tokens: null\n")]).max_tokens is None


class Reads(dict):
    """Option values that remember which keys were read."""

    def __init__(self, values):
        super().__init__(values)
        self.read = set()

    def __getitem__(self, key):
        self.read.add(key)
        return super().__getitem__(key)


@pytest.mark.parametrize(
    "command, builder, argv",
    [("embed", job_config, ["--input", "a", "--output", "o"]), ("capacity", capacity_config, ["--input", "a"])],
)
def test_every_option_a_commands_config_reads_is_one_the_command_takes(command, builder, argv):
    """Parsing gives every option of the table, so a builder never fails on a missing key; but an option it
    reads that the command does not take would be stuck at its default (capacity once lacked --packing)."""
    values = Reads(parse_options(argv, command, prog=command))
    assert set(values) == {o.key for o in OPTIONS}
    builder(values)
    assert values.read - {o.key for o in options_of(command)} == set()


def test_every_command_in_the_table_is_a_docembed_command():
    named = {command for o in OPTIONS for command in o.commands}
    assert named == set(COMMANDS) - {"submit"}  # submit passes `ray job submit`'s own options through


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sample-docs", "0"], "--sample-docs must be at least 1, got 0"),
        (["--encoder-tokens-per-s", "0"], "--encoder-tokens-per-s must be positive, got 0"),
        (["--headroom", "-1"], "--headroom must be at least 1, got -1"),
        (["--headroom", "0.5"], "--headroom must be at least 1, got 0.5"),
        (["--headroom", "nan"], "--headroom must be at least 1, got nan"),
        (["--encoder-tokens-per-s", "inf"], "--encoder-tokens-per-s must be positive, got inf"),
    ],
)
def test_the_capacity_planners_own_options_are_checked(argv, message):
    with pytest.raises(ConfigError, match=message):
        capacity_config(parse_options(["--input", "a", *argv], "capacity", prog="capacity"))


def test_the_capacity_planner_cuts_chunks_and_measures_the_encoder_as_the_job_does():
    """Its chunks carry the job's prompt, and the encoder runs at their window: the capacity planner once had no
    --prompt and measured the encoder at the model's window whatever --max-tokens said."""
    argv = ["--input", "a", "--max-tokens", "64", "--overlap", "8", "--prompt", "query: "]
    job = job_config(parse_options([*argv, "--output", "o"], "embed", prog="embed"))
    planned = capacity_config(parse_options(argv, "capacity", prog="capacity"))
    spec = model_dir.resolve(None)
    chunking, encoder = chunks_and_encoder(spec, planned)
    assert (chunking, encoder) == chunks_and_encoder(spec, job)
    assert (chunking.max_tokens, chunking.prompt, encoder.max_tokens) == (64, "query: ", 64)


def test_a_small_max_tokens_alone_is_told_the_overlap_is_the_default_and_what_to_pass():
    spec = model_dir.resolve(None)  # 2 special tokens: a window of 8 holds 6 of the text's
    for given, got in [([], "the default 32: pass --overlap N with N < 6"), (["--overlap", "7"], "7")]:
        values = parse_options(["--input", "a", "--max-tokens", "8", *given], "capacity", prog="capacity")
        with pytest.raises(ConfigError, match=re.escape(f"--overlap must be in [0, 6) for --max-tokens 8, got {got}")):
            chunks_and_encoder(spec, capacity_config(values))
