"""scalerl's forecast where users already work: ``integrations.optuna.ForecastPruner`` (the
``optuna`` extra). Nothing in the core imports this package."""
