"""The run: the Ray Data job graph over the stages, its tally and stage clocks, and what it shows the user."""
