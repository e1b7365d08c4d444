defmodule ExBashkit.Deadline do
  @moduledoc false
  # The rule for an exec past its deadline, in one place: the interpreter
  # is given `slack_ms/0` to stop by itself; past that the exec is answered
  # in its stead, with its output so far: by `ExBashkit.Worker` for a
  # session in a worker (which then kills the worker OS process after its
  # grace period), by the waiting caller in the node
  # (`ExBashkit.Backend.give_up/4`), and, for a `cancel/1`, by the Rust
  # watchdog (`run/watchdog.rs`), whose constant this reads, so both
  # languages keep the same slack.
  #
  # The slack covers a loaded worker's late answer: a stopped script waits
  # for its turn on a runner behind the others ready to run (at most
  # 37–88 ms late with 32 endless loops a worker, 250 ms with 64, 0.8–1.4 s
  # with 255, a worker's most; bench/DECISIONS.md).

  alias ExBashkit.Native

  @doc false
  # How long an exec past its deadline has to stop by itself.
  @spec slack_ms() :: pos_integer()
  def slack_ms, do: Native.answer_slack_ms()

  @doc false
  # When to look again at an exec that was not due yet (`{:running, left}`:
  # it waited for its session's turn, and the session's own timeout counts
  # from its start): when it is due, `left` ms (or in a second, while it
  # still waits), plus the slack.
  @spec look_again_ms(non_neg_integer() | nil) :: pos_integer()
  def look_again_ms(left), do: (left || 1_000) + slack_ms()
end
