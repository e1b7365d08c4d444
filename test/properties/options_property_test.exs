defmodule ExBashkit.Properties.OptionsTest do
  # Random terms as `Session.new/1` options: a session or an `ArgumentError`
  # raised by our validation, never another exception, a NIF-level badarg, a
  # crash or a hang.
  use ExUnit.Case, async: true
  use ExBashkit.Test.Property

  alias ExBashkit.{Result, Session}
  alias ExBashkit.Test.Gen

  setup_all do
    # The only host directory any generated mount may name (see Gen.options/1).
    scratch =
      Path.join(System.tmp_dir!(), "ex_bashkit_opts_#{System.unique_integer([:positive])}")

    File.mkdir_p!(Path.join(scratch, ".ssh"))
    File.mkdir_p!(Path.join(scratch, ".aws"))
    File.write!(Path.join(scratch, "file"), "not a dir")
    on_exit(fn -> File.rm_rf!(scratch) end)
    %{scratch: scratch}
  end

  # The property body runs in the test process: hand it the scratch dir.
  setup %{scratch: scratch} do
    Process.put(:scratch, scratch)
    :ok
  end

  property "new/1 returns a session or raises ArgumentError, for any term",
    quick: 300,
    heavy: 20_000 do
    scratch = Process.get(:scratch) || raise "no scratch dir"

    forall(Gen.options(scratch), fn opts ->
      case bounded(fn -> outcome(opts) end, 15_000) do
        {:ok, :session_ok} -> true
        {:ok, :argument_error} -> true
        {:ok, other} -> raise "unexpected outcome: #{inspect(other)}"
        {:raised, formatted} -> raise formatted
        :timeout -> raise "Session.new/1 or the first exec hung for 15 s"
      end
    end)
  end

  defp outcome(opts) do
    session =
      try do
        Session.new(opts)
      rescue
        e in ArgumentError ->
          # A badarg from the NIF means Elixir accepted a shape the NIF cannot
          # decode: a validation gap, not a clean ArgumentError.
          case __STACKTRACE__ do
            [{ExBashkit.Native, _, _, _} | _] ->
              raise "NIF rejected options that Options.parse!/1 accepted: #{Exception.message(e)}"

            _ ->
              if Exception.message(e) == "argument error",
                do: raise("bare badarg instead of a message naming the option"),
                else: :argument_error
          end
      end

    case session do
      :argument_error ->
        :argument_error

      %Session{} ->
        case Session.run(session, "echo ok") do
          {:ok, %Result{}} -> :session_ok
          {:error, %ExBashkit.Error{message: message}} when is_binary(message) -> :session_ok
        end
    end
  end
end
