"""Auto-tuning of schedule knobs by measurement (Rieber's dissertation, ch. 5; the AutoTVM recipe)."""
