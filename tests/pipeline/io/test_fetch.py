"""Model directories fetched from storage once per node, and again when they change."""

from __future__ import annotations

import json

from pipeline.io import fetch


def test_model_directory_is_fetched_once_and_refetched_when_it_changes(tmp_path, monkeypatch):
    remote = tmp_path / "remote"
    (remote / "1_Pooling").mkdir(parents=True)
    (remote / "config.json").write_text("{}")
    (remote / "1_Pooling" / "config.json").write_text("{}")
    fetches = []
    real = fetch._fetch_file
    monkeypatch.setattr(fetch, "_fetch_file", lambda *a: (fetches.append(a[1]), real(*a)))
    cache = tmp_path / "cache"
    local = fetch.fetch_dir(f"file://{remote}", cache)
    assert (local / "1_Pooling" / "config.json").read_text() == "{}" and len(fetches) == 2
    assert fetch.fetch_dir(f"file://{remote}", cache) == local and len(fetches) == 2
    assert fetch.fetch_dir(f"file://{remote}/", cache) == local and len(fetches) == 2  # one directory, one copy
    (remote / "config.json").write_text('{"changed": true}')
    assert json.loads((fetch.fetch_dir(f"file://{remote}", cache) / "config.json").read_text()) == {"changed": True}
    assert len(fetches) == 4
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]
