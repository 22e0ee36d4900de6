from forensics.cli import main

main()
