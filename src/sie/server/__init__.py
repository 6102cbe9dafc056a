"""The standalone HTTP server: settings, CLI, app factory and thin routes over the engine."""
