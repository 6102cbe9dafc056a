"""Work after the forward pass: normalisation and output dtypes."""
