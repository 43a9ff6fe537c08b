"""The MRO loop's evaluation methods (:mod:`.methods`), their results metrics (:mod:`.metrics`) and the Controller's
calibrated stopping (:mod:`.stopping`)."""
