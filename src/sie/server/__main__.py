from sie.server.cli import main

main()
