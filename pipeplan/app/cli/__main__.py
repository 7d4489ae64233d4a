from pipeplan.app.cli.main import main

main()
