from reprokit.cli.main import main

main()
