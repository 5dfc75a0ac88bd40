"""Credit-assignment diagnostics: tiny text envs with a horizon knob, a noise knob, verified progress and anchors.

``chain`` (Chain-v0: every turn's choice counts), ``umbrella`` (Umbrella-v0: only the first turn's choice counts,
then noisy distractor rewards), ``key_door`` (KeyDoor-v0: a clue in the first observation opens the door on the last
turn); ``base`` holds what they share, ``agents`` their ``oracle`` and ``random`` agents.
"""
