# Distributed from the start: the cluster and peer tests need it, and
# turning it on later renames the node under test files still compiling.
ExBashkit.Test.Cluster.distribute!()

# Heavy runs (stress, repeats, soak) are opt-in: `mix test --only heavy`
# (or scripts/stress). Reproducers of known, unfixed issues are opt-in too:
# `mix test --only known_issue` (see test/reliability/known_issues_test.exs).
#
# An `assert_receive` without a timeout of its own waits up to 5 s, not
# ExUnit's 100 ms: it returns as soon as the message is there, and a
# loaded CI machine can take longer than 100 ms to deliver a `DOWN`.
ExUnit.start(exclude: [:heavy, :known_issue], assert_receive_timeout: 5_000)
