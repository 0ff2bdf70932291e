# fusewire — the two entry points of README's quick start.
#   make demo   builds and runs the main demo (installs what it needs)
#   make test   runs every test of the project (installs what it needs)
.PHONY: demo test setup bench

demo:
	bash scripts/demo.sh

test:
	bash scripts/test.sh

setup:
	bash scripts/setup.sh

bench:
	bash scripts/bench.sh
