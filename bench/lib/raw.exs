defmodule Bench.Raw do
  @moduledoc false
  # Runs the raw-bashkit Rust harness (bench/raw) for some case groups and
  # reads its output: one Erlang term per line (see bench/raw/src/main.rs).

  @doc "Path of the harness binary built by `scripts/bench`."
  def binary do
    target = System.get_env("CARGO_TARGET_DIR") || "native/ex_bashkit/target"
    Path.expand(Path.join([target, profile(), "ex_bashkit_raw_bench"]))
  end

  @doc """
  The cargo profile both sides were built with, named as its output
  directory (`EX_BASHKIT_CARGO_PROFILE`, which `scripts/bench` sets for the
  harness and the NIF alike).
  """
  def profile, do: System.get_env("EX_BASHKIT_CARGO_PROFILE", "release")

  def available?, do: File.exists?(binary())

  @doc """
  Run `groups`; returns records `{:sample, name, ns_list}`,
  `{:throughput, name, sessions, ops, elapsed_ns, cpu_ns, latencies}`,
  `{:memory, name, count, bytes_per_session, rss_before_kb, rss_after_kb}`,
  `{:info, key, value}`, with every name prefixed by "raw/".
  """
  def run(groups, quick?) do
    args = if(quick?, do: ["--quick"], else: []) ++ groups

    case System.cmd(binary(), args) do
      {out, 0} -> parse(out)
      {out, code} -> raise "raw harness failed (exit #{code}): #{String.slice(out, 0, 500)}"
    end
  end

  @doc """
  One second of the harness's `phases` group: the calibrator's median per
  window of about 8 ms (µs), which rises while the host slows this VM's
  memory traffic (bench/DECISIONS.md on measuring). `[]` without the
  harness.
  """
  def calibrator_windows do
    if available?() do
      Enum.find_value(run(["phases"], true), [], fn
        {:info, "raw/phases.calibrator_us", text} ->
          text |> String.split() |> Enum.map(&String.to_integer/1)

        _ ->
          nil
      end)
    else
      []
    end
  end

  @doc "Run the UDP pinger against 127.0.0.1:`port` for `millis` ms."
  def ping(port, millis) do
    case System.cmd(binary(), ["--ping", Integer.to_string(port), Integer.to_string(millis)]) do
      {out, 0} -> parse(out)
      {out, code} -> raise "raw pinger failed (exit #{code}): #{String.slice(out, 0, 500)}"
    end
  end

  defp parse(text) do
    path = Path.join(System.tmp_dir!(), "ex_bashkit_raw_#{System.unique_integer([:positive])}")
    File.write!(path, text)

    try do
      {:ok, terms} = :file.consult(String.to_charlist(path))
      Enum.map(terms, &prefix/1)
    after
      File.rm(path)
    end
  end

  defp prefix(record) do
    put_elem(record, 1, "raw/" <> elem(record, 1))
  end
end
