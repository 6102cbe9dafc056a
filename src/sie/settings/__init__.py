"""Every process's configuration, read once by its composition root: the server's (``server``), the
gateway's (``gateway``), sie-config's (``control``), made of the groups they share (``common``)."""
