"""`python -m kopgen`, and the `kopgen` command: Ctrl-C while kopgen loads is one line and exit 130."""

import sys


def run() -> None:
    try:
        from .cli import main  # jinja2, yaml and kopgen's own modules: most of the start-up time
    except KeyboardInterrupt:
        sys.stderr.write("kopgen: interrupted\n")
        sys.exit(130)  # cli.EXIT_INTERRUPTED, which this module must not import to catch it
    main()


if __name__ == "__main__":
    run()
