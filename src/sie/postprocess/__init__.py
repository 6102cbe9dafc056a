"""Work after the forward pass: normalisation, output dtypes and MUVERA (multivector to dense)."""
