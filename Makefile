# Two commands do all the set-up on a fresh Debian / Python 3.11 machine:
#   make lab    create/refresh .venv, install collnb + JupyterLab, copy the notebooks into work/
#               (never overwriting your copies) and open JupyterLab there
#   make lab-zh the Chinese edition (the same as make lab EDITION=zh): JupyterLab's menus in Chinese,
#               the Chinese notebooks (notebooks/zh-CN/) copied into work/zh-CN/, collnb speaking Chinese
#   make test   create/refresh .venv with the test extras, run the whole suite
#   make test-fast  the same venv, only the tests not marked slow (under 2 minutes on 2 cores)
# More:
#   make docs     the book (Sphinx + MyST-NB), every notebook executed, into docs/_build/html, and its
#                 Chinese edition (notebooks/zh-CN/) into docs/_build/html/zh-CN
#   make student  student versions without solutions + nbgrader autograding, into classroom/
#                 (both from the notebooks as committed: they refuse while notebooks/ differs)
#   make meta     re-apply notebook metadata (Colab cell, slides, hidden solutions, README links) and
#                 README's module table (tools/layout.py: each module's docstring's first sentence)
#   make i18n     the translation catalogues (tools/catalogues.py, Babel): new messages added to
#                 collnb/locale/*/LC_MESSAGES/collnb-*.po, the .mo compiled; fails on a missing translation
#   make lint     ruff on the code, tests, tools and benchmarks; mypy --strict on the package
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PYTEST_ARGS ?=
# make test and make test-fast run the tests on this many pytest-xdist workers (0: in this process, one at a time).
# Each test file stays on one worker (--dist loadfile): its module fixtures are made once.
TEST_WORKERS ?= 2
PYTEST_RUN := $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile
LAB_ARGS ?=
# The learner's own copies of the notebooks (git ignores work/; `make lab WORK=dir` for another place).
WORK ?= work

# The edition `make lab` opens: en (notebooks/) or zh (notebooks/zh-CN/; `make lab-zh`). Not LANG:
# that is the locale's environment variable.
EDITION ?= en
ifeq ($(filter en zh,$(EDITION)),)
$(error EDITION must be en or zh (make lab, make lab-zh or make lab EDITION=zh), got '$(EDITION)')
endif

.PHONY: lab lab-zh test test-fast compat venv clean docs figures student meta lint i18n

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Re-install when pyproject.toml or constraints.txt changes. pyproject.toml gives torch a range;
# constraints.txt pins the tested release (2.13.0, its CPU wheel), so pip never picks another.
# PYTHONWARNINGS: setuptools' boxed "Editable installation" warning (printed on every editable install,
# about folders named like the package in the working directory; here that folder is the package) made a
# successful `make lab` look failed. Only that one message is silenced.
PIP_INSTALL := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -c constraints.txt

$(VENV)/.lab-installed: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e ".[lab]"
	touch $@

# The Chinese edition's JupyterLab: the `zh` extra (JupyterLab's Chinese language pack).
$(VENV)/.zh-installed: pyproject.toml constraints.txt | $(VENV)/.lab-installed
	$(PIP_INSTALL) -e ".[lab,zh]"
	touch $@

$(VENV)/.test-installed: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP_INSTALL) -e ".[lab,test,docs,classroom,lint]"
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

# The learner works on copies in $(WORK) (tools/lab.py copies a notebook only when $(WORK) has none of
# that name), so autosave and outputs never touch notebooks/. JUPYTER_CONFIG_PATH=etc/lab turns off
# the test and classroom extras' extensions (nbgrader, ipyparallel, Voila preview, Notebook 7) that
# make test / make student install into this .venv; a reload reads it again, so it holds for
# extensions installed while the lab runs.
# --allow-root: containers and CI machines often log in as root, which JupyterLab refuses by default.
# The Chinese edition (EDITION=zh) starts JupyterLab with a settings folder of its own (the same
# defaults plus the language pack's locale zh_CN, tools/lab.py overrides), so only that run's menus are
# Chinese and `make lab` stays English; COLLNB_LANG=zh makes every kernel's collnb speak Chinese.
# Each edition keeps its open tabs in a workspaces folder of its own (in .venv, not ~/.jupyter): `make lab-zh`
# reopened the English session's tabs and started a kernel for each.
LAB_SETTINGS_ZH := $(VENV)/share/jupyter/lab/settings-zh
LAB_OVERRIDES_ZH := $(LAB_SETTINGS_ZH)/overrides.d/collnb.json
$(LAB_OVERRIDES_ZH): etc/jupyterlab-overrides.json tools/lab.py | $(VENV)/.lab-installed
	$(BIN)/python tools/lab.py overrides $@ --edition zh

ifeq ($(EDITION),zh)
LAB_NEEDS := $(VENV)/.lab-installed $(VENV)/.zh-installed $(LAB_OVERRIDES) $(LAB_OVERRIDES_ZH)
LAB_ENV := COLLNB_LANG=zh
LAB_OPEN := zh-CN/$(FIRST_NOTEBOOK)
LAB_EDITION_ARGS := --LabApp.app_settings_dir="$(CURDIR)/$(LAB_SETTINGS_ZH)"
else
LAB_NEEDS := $(VENV)/.lab-installed $(LAB_OVERRIDES)
LAB_ENV :=
LAB_OPEN := $(FIRST_NOTEBOOK)
LAB_EDITION_ARGS :=
endif

lab: $(LAB_NEEDS)
	$(BIN)/python tools/lab.py prepare $(WORK) --edition $(EDITION)
	$(LAB_ENV) JUPYTER_CONFIG_PATH="$(CURDIR)/etc/lab$(if $(JUPYTER_CONFIG_PATH),:$(JUPYTER_CONFIG_PATH))" \
	$(BIN)/jupyter lab --notebook-dir=$(WORK) --ServerApp.ip=127.0.0.1 $(if $(DISPLAY),,--no-browser) \
		--LabApp.news_url=None --LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate \
		--LabApp.default_url=/lab/tree/$(LAB_OPEN) $(LAB_EDITION_ARGS) \
		--LabApp.workspaces_dir="$(CURDIR)/$(VENV)/share/jupyter/lab/workspaces-$(EDITION)" \
		$(if $(filter 0,$(shell id -u)),--allow-root,) $(LAB_ARGS)

lab-zh:
	$(MAKE) lab EDITION=zh

test: $(VENV)/.test-installed
	$(PYTEST_RUN) $(PYTEST_ARGS)

# The edit-and-run loop: every test not marked slow (unit tests, a sample of real-rank runs at small
# world sizes, the command line in-process). The real-rank matrices of every world size, dtype and op,
# the kernel, notebook and browser tests are marked slow and run in `make test`.
test-fast: $(VENV)/.test-installed
	$(PYTEST_RUN) -m "not slow" $(PYTEST_ARGS)

# The torch-compatibility run on another release: `make compat TORCH=2.15.0` builds .venv-torch-2.15.0
# (that torch, every other package as constraints.txt pins it) and runs the fast tests and every English
# notebook there (tools/compat.sh). .ci/run does it for the newest tested release and the floor
# (collnb/torch_versions.py's TESTED).
TORCH ?=
compat:
	@test -n "$(TORCH)" || { echo "make compat needs a torch release: make compat TORCH=2.15.0"; exit 2; }
	PYTHON=$(PYTHON) tools/compat.sh $(TORCH)

# Configured in pyproject.toml: ruff's rules and what they skip, mypy's files (strict).
lint: $(VENV)/.test-installed
	$(BIN)/ruff check collnb tests tools benchmarks examples
	$(BIN)/mypy

# The book: README figures from real ranks, notebook metadata, then Sphinx with MyST-NB executing
# every notebook (cached in docs/_build/.jupyter_cache, which tests/test_notebooks.py and test_zh_edition.py
# read: make test after make docs executes no notebook again). Output: docs/_build/html.
# A kernel that failed to start (a port taken between choosing and binding it, on a loaded machine)
# fails the build; the retry re-runs only the notebooks not yet in the cache. -j 2: two notebooks
# execute at once (2 cores), as tests/test_notebooks.py does.
SPHINX := $(BIN)/python -m sphinx -b html -q -j 2 -c docs . docs/_build/html
# The Chinese edition (docs/editions.py): the same conf with COLLNB_BOOK_EDITION=zh, the twins
# notebooks/zh-CN/ executed (the same jupyter-cache), built in docs/_build/zh (its executed notebooks
# and failed-notebooks.txt stay there) and copied into the site as docs/_build/html/zh-CN.
# COLLNB_BOOK_NOTEBOOKS=00_launching_ranks,01_broadcast make docs builds only those notebooks.
SPHINX_ZH := COLLNB_BOOK_EDITION=zh $(BIN)/python -m sphinx -b html -q -j 2 -c docs -d docs/_build/zh/doctrees \
	. docs/_build/zh/html
# The book is built from the notebooks as committed (tools/committed.py refuses, naming each notebook
# that differs and how to restore it). A notebook whose execution fails is named at the end with the
# failing cell and its error (docs/conf.py; also in docs/_build/failed-notebooks.txt).
docs: $(VENV)/.test-installed
	$(BIN)/python tools/committed.py the book
	$(BIN)/python tools/notebook_meta.py
	$(BIN)/python tools/readme_figures.py docs/_build/img
	$(SPHINX) || { echo "book build failed; retrying once (notebooks that ran are cached)"; $(SPHINX); }
	$(SPHINX_ZH) || { echo "Chinese book build failed; retrying once (notebooks that ran are cached)"; $(SPHINX_ZH); }
	rm -rf docs/_build/html/zh-CN && cp -r docs/_build/zh/html docs/_build/html/zh-CN
	@echo "book: docs/_build/html/index.html; 中文版: docs/_build/html/zh-CN/index.html"

# README's two pictures (docs/img), made again on real ranks. make docs makes them too, into
# docs/_build/img (checked, the tree untouched: the replay shows measured times, so it differs each run).
figures: $(VENV)/.test-installed
	$(BIN)/python tools/readme_figures.py

# Student versions (no solutions) and the nbgrader course folder: classroom/, from the notebooks as
# committed (tools/student.py refuses while notebooks/ differs from the last commit).
student: $(VENV)/.test-installed
	$(BIN)/python tools/student.py generate classroom

meta: $(BIN)/python
	$(BIN)/python tools/notebook_meta.py
	$(BIN)/python tools/layout.py

clean:
	rm -rf $(VENV) .venv-torch-* build *.egg-info .pytest_cache docs/_build classroom

i18n: $(VENV)/.test-installed
	$(BIN)/python tools/catalogues.py
