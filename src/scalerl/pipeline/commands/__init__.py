"""What the CLI runs: ``scalerl train`` (``train``), ``scalerl export`` (``export``,
``export_target``), the checks before a run (``preflight``) and the closing report
(``report``). On top: nothing else in ``pipeline`` imports them."""
