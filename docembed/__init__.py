"""`python -m docembed`: the `docembed` command, whose code is pipeline.cli."""
