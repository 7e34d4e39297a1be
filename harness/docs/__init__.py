"""The docs that commands write: the command reference and the validation tables."""
