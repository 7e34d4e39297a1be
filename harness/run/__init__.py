"""A run, parent side: the case matrix (`plan`), executing it with exactly one stored row per
case (`execute`), and the environment manifest every run stores (`environment`)."""
