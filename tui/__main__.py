from tui.cli.main import entry

entry()
