"""Models trained elsewhere: files and MLflow models brought into the model store."""
