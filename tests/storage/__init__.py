"""Storage tests: a package, so that their conftest and helpers never shadow another directory's."""
