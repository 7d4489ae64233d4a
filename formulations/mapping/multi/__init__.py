"""Several DNNs on one SoC: a joint mapping of concurrent networks that share the PUs (issue 19)."""
