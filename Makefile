# Two commands do all the set-up on a fresh Debian / Python 3.11 machine:
#   make lab    create/refresh .venv, install collnb + JupyterLab, open JupyterLab on notebooks/
#   make test   create/refresh .venv with the test extras, run the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=
LAB_ARGS ?=

.PHONY: lab test venv clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install when pyproject.toml changes. torch is pinned to 2.13.0 there (its CPU wheel).
$(VENV)/.lab-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[lab]"
	touch $@

$(VENV)/.test-installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[lab,test]"
	touch $@

venv: $(VENV)/.lab-installed

# JupyterLab settings for the server `make lab` starts: no "get notified about news" toast, no update
# check (etc/jupyterlab-overrides.json, installed as defaults into this .venv's app settings dir
# share/jupyter/lab/settings/overrides.d/, never into the user's ~/.jupyter; a learner's own
# setting still wins). It opens on the first notebook, with the notebooks listed beside it.
LAB_OVERRIDES := $(VENV)/share/jupyter/lab/settings/overrides.d/collnb.json
FIRST_NOTEBOOK := 00_launching_ranks.ipynb

$(LAB_OVERRIDES): etc/jupyterlab-overrides.json | $(VENV)/.lab-installed
	mkdir -p $(dir $@)
	cp etc/jupyterlab-overrides.json $@

# --allow-root: containers and CI machines often log in as root, which JupyterLab refuses by default.
lab: $(VENV)/.lab-installed $(LAB_OVERRIDES)
	$(BIN)/jupyter lab --notebook-dir=notebooks --ServerApp.ip=127.0.0.1 $(if $(DISPLAY),,--no-browser) \
		--LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
		--LabApp.default_url=/lab/tree/$(FIRST_NOTEBOOK) $(if $(filter 0,$(shell id -u)),--allow-root,) $(LAB_ARGS)

test: $(VENV)/.test-installed
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
