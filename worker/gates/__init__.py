"""Gates over windowed aggregates (`evaluator`), what they can watch (`fields`), what the
gates topic says (`history`) and the drill-down from a firing to its cases (`drilldown`)."""
