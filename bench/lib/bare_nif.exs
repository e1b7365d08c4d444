defmodule Bench.BareNif do
  @moduledoc false
  # bashkit behind the thinnest NIF (bench/raw/src/lib.rs, built with the raw
  # harness by scripts/bench): an interpreter built by the NIF's settings and
  # `exec/2` polled inline on the caller's scheduler, with nothing of ours
  # around it. Timed beside `Session.exec/2` and `Session.new/0`, it is what
  # any NIF over bashkit pays in the VM (the floor table of the report).

  @on_load :load

  @doc "Path of the library, without its extension (as `:erlang.load_nif/2` takes it)."
  def path, do: Path.join(Path.dirname(Bench.Raw.binary()), "libex_bashkit_bare_nif")

  def available?, do: File.exists?(path() <> ".so")

  # Not built (a harness from before it existed): the module loads without
  # it, and the cases that need it report it unavailable.
  def load do
    if available?(), do: :erlang.load_nif(String.to_charlist(path()), 0), else: :ok
  end

  @doc "A new interpreter, built during the call; dropped where its handle is collected."
  def new, do: :erlang.nif_error(:not_loaded)

  @doc "`{stdout, stderr, exit_code}` of `script`, run to completion in the call."
  def exec(_bash, _script), do: :erlang.nif_error(:not_loaded)
end
