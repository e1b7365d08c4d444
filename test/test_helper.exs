# Distributed from the start: the cluster and peer tests need it, and
# turning it on later renames the node under test files still compiling.
ExBashkit.Test.Cluster.distribute!()

# Heavy runs (stress, repeats, soak) are opt-in: `mix test --only heavy`
# (or scripts/stress). Reproducers of known, unfixed issues are opt-in too:
# `mix test --only known_issue` (see test/reliability/known_issues_test.exs).
ExUnit.start(exclude: [:heavy, :known_issue])
