"""A framework's training step on a cluster, predicted from calibration alone: the one rule
`validate` scores and `recommend` uses, so that neither imports the other."""
