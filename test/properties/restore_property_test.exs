defmodule ExBashkit.Properties.RestoreTest do
  # Random bytes, and mutated real snapshots, given to `restore/3`: always
  # `{:error, _}`, and the session is left exactly as it was (its variables,
  # functions, cwd and files), and still usable.
  use ExUnit.Case, async: true
  use ExBashkit.Test.Property

  alias :proper_types, as: T
  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Gen

  # Called through apply/3 so this file compiles without "undefined function"
  # warnings in builds that do not have snapshot/restore yet (it is skipped
  # there).
  defp snapshot(s, opts \\ []), do: apply(Session, :snapshot, [s, opts])
  defp restore(s, bytes, opts), do: apply(Session, :restore, [s, bytes, opts])

  # A session with recognisable state in every part a restore would replace.
  defp marked_session do
    s = Session.new()

    {:ok, %Result{exit_code: 0}} =
      Session.exec(s, """
      export MARK=kept; plain=also; arr=(a b)
      mark_fn() { echo fn-kept; }
      alias mark_alias='echo alias-kept'
      mkdir -p /w && cd /w && echo file-kept > /w/f
      """)

    s
  end

  defp state(s) do
    {:ok, %Result{stdout: out}} =
      Session.exec(s, ~S(echo "$MARK $plain ${arr[1]}"; mark_fn; mark_alias; pwd; cat /w/f))

    {out, Session.read_file(s, "/w/f"), Session.list_dir(s, "/w")}
  end

  defp assert_rejected_and_unchanged(s, bytes, opts) do
    before = state(s)

    case restore(s, bytes, opts) do
      {:error, message} when is_binary(message) ->
        state(s) == before or raise "session changed by a failed restore: #{inspect(state(s))}"

      other ->
        raise "restore accepted bad bytes: #{inspect(other, limit: 5)}"
    end
  end

  property "random bytes are rejected and change nothing", quick: 100, heavy: 5_000 do
    s = marked_session()

    forall(T.tuple([Gen.bytes(), T.elements([[], [key: "k"], [key: <<0, 1, 2>>]])]), fn {bytes,
                                                                                         opts} ->
      assert_rejected_and_unchanged(s, bytes, opts)
    end)
  end

  # A mutation of a real snapshot that really changes it.
  defp mutation do
    T.oneof([
      T.tuple([T.exactly(:flip), T.non_neg_integer(), T.integer(1, 255)]),
      T.tuple([T.exactly(:truncate), T.non_neg_integer()]),
      T.tuple([T.exactly(:insert), T.non_neg_integer(), T.non_empty(T.binary())]),
      T.tuple([T.exactly(:delete), T.non_neg_integer(), T.integer(1, 64)]),
      T.tuple([T.exactly(:append), T.non_empty(T.binary())]),
      T.tuple([T.exactly(:swap_halves)])
    ])
  end

  # Mutations that need a byte to work on leave an empty binary alone.
  defp mutate("", {op, _, _}) when op in [:flip, :delete], do: ""
  defp mutate("", {:truncate, _}), do: ""

  defp mutate(bytes, {:flip, at, mask}) do
    at = rem(at, byte_size(bytes))
    <<pre::binary-size(at), b, post::binary>> = bytes
    pre <> <<Bitwise.bxor(b, mask)>> <> post
  end

  defp mutate(bytes, {:truncate, n}), do: binary_part(bytes, 0, rem(n, byte_size(bytes)))

  defp mutate(bytes, {:insert, at, data}) do
    at = rem(at, byte_size(bytes) + 1)
    binary_part(bytes, 0, at) <> data <> binary_part(bytes, at, byte_size(bytes) - at)
  end

  defp mutate(bytes, {:delete, at, n}) do
    at = rem(at, byte_size(bytes))
    n = min(n, byte_size(bytes) - at)
    binary_part(bytes, 0, at) <> binary_part(bytes, at + n, byte_size(bytes) - at - n)
  end

  defp mutate(bytes, {:append, data}), do: bytes <> data

  defp mutate(bytes, {:swap_halves}) do
    half = div(byte_size(bytes), 2)
    binary_part(bytes, half, byte_size(bytes) - half) <> binary_part(bytes, 0, half)
  end

  property "mutated real snapshots (plain and keyed) are rejected and change nothing",
    quick: 100,
    heavy: 5_000 do
    source = Session.new(files: %{"/src/data" => "source-state"})
    {:ok, _} = Session.exec(source, "export FROM_SNAPSHOT=1; cd /src")
    {:ok, plain} = snapshot(source)
    {:ok, keyed} = snapshot(source, key: "secret-key")
    target = marked_session()

    forall(T.tuple([T.elements([:plain, :keyed]), T.non_empty(T.list(mutation()))]), fn {kind,
                                                                                         mutations} ->
      {original, opts} = if kind == :plain, do: {plain, []}, else: {keyed, [key: "secret-key"]}
      mutated = Enum.reduce(mutations, original, &mutate(&2, &1))

      # A mutation sequence that cancels out is not a mutation.
      mutated == original or assert_rejected_and_unchanged(target, mutated, opts)
    end)
  end

  test "positive control: the unmutated snapshots restore" do
    source = Session.new(files: %{"/src/data" => "source-state"})
    {:ok, _} = Session.exec(source, "export FROM_SNAPSHOT=1")
    {:ok, plain} = snapshot(source)
    {:ok, keyed} = snapshot(source, key: "secret-key")

    for {bytes, opts} <- [{plain, []}, {keyed, [key: "secret-key"]}] do
      target = marked_session()
      assert {:ok, restored} = restore(target, bytes, opts)
      assert {:ok, %Result{stdout: "1\n"}} = Session.exec(restored, "echo $FROM_SNAPSHOT")
      assert Session.read_file(restored, "/src/data") == {:ok, "source-state"}
    end
  end
end
