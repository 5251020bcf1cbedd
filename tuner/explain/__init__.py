"""Why a tune's answer is what it is (tuner.explain.sensitivity: what each knob is worth)."""
