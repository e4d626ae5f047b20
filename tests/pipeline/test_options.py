import pytest

from pipeline.errors import ConfigError
from pipeline.options import parse_job_args


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
        ("input: a\noutput: o\noverlap: lots\n", "overlap must be int"),
        ("input: a\noutput: o\noverlap: true\n", "overlap must be int"),
        ("input: a\noutput: o\ndtype: float16\n", "dtype must be one of"),
        ("input: a\noutput: o\nchunking: sentences\n", "chunking must be one of boundaries, window"),
        ("input: a\noutput: o\nmesh: data=two\n", "mesh must look like"),
        ("input: a\noutput: o\npdf-extractor: mupdf\n", "pdf_extractor must be one of auto, pypdf, pdfium"),
        ("input: a\noutput: o\nextract-timeout: 0\n", "--extract-timeout must be at least 1 s"),
        ("- just\n- a list\n", "must hold a mapping"),
        ("input: [a\n", "not valid YAML"),
        ("output: o\n", "--input is required"),
    ],
)
def test_bad_config_files_are_refused_clearly(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        parse_job_args(["--config", write(tmp_path, text)])


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="cannot read --config"):
        parse_job_args(["--config", str(tmp_path / "nope.yaml")])
