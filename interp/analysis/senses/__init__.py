"""Word senses: which tokens an ambiguous word is, its states by stage, the sense probe,
and the heads that attend to its clue words."""
