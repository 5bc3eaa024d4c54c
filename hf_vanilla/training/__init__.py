"""Training with the paper's recipe (section 5): settings, setup, the update loop, schedule and run
directory."""
