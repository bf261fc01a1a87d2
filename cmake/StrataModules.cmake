# The module table: every module under src/, in dependency order, and the
# modules its code may include besides itself. This is the only copy.
# strata_module() links each module's library to exactly the modules listed
# here, and tests/layering_check.cmake fails on any include outside them, on
# a module directory missing from the table (or a table row with no
# directory), on another module's internal/ headers, and on a row of the
# table in docs/architecture.md that says otherwise.
#
# A module may include only modules above it: a row names modules from the
# rows before it.
set(STRATA_MODULES util net kernels format text grammar model engine sampling cache obs config session backend gateway server tune cli)

set(STRATA_MAY_INCLUDE_util "")
set(STRATA_MAY_INCLUDE_net util)
set(STRATA_MAY_INCLUDE_kernels util)
set(STRATA_MAY_INCLUDE_format kernels util)
set(STRATA_MAY_INCLUDE_text format kernels util)
set(STRATA_MAY_INCLUDE_grammar text format kernels util)
set(STRATA_MAY_INCLUDE_model text format kernels util)
set(STRATA_MAY_INCLUDE_engine model text format kernels util)
set(STRATA_MAY_INCLUDE_sampling util)
set(STRATA_MAY_INCLUDE_cache net util)
set(STRATA_MAY_INCLUDE_obs util)
set(STRATA_MAY_INCLUDE_config util)
set(STRATA_MAY_INCLUDE_session net util)
set(STRATA_MAY_INCLUDE_backend engine sampling cache obs net model grammar text format kernels util)
set(STRATA_MAY_INCLUDE_gateway backend engine sampling cache obs model text format kernels util)
set(STRATA_MAY_INCLUDE_server gateway backend session obs net util)
set(STRATA_MAY_INCLUDE_tune server gateway backend session config obs cache sampling engine model grammar text format kernels net util)
set(STRATA_MAY_INCLUDE_cli tune server gateway backend session config obs cache sampling engine model grammar text format kernels net util)
