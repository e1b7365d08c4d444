defmodule ExBashkit.Session.CeilingsTest do
  # Node-wide ceilings in application config (issue 19):
  # `config :ex_bashkit, max_timeout_ms: ..., max_reply_bytes: ...`.
  # They are global, so this module runs alone (async: false) and restores
  # the config after each test.
  use ExUnit.Case, async: false

  alias ExBashkit.{Result, Session}

  setup do
    saved =
      for key <- [:max_timeout_ms, :max_reply_bytes],
          do: {key, Application.fetch_env(:ex_bashkit, key)}

    on_exit(fn ->
      for {key, value} <- saved do
        case value do
          {:ok, v} -> Application.put_env(:ex_bashkit, key, v)
          :error -> Application.delete_env(:ex_bashkit, key)
        end
      end
    end)

    :ok
  end

  describe "max_timeout_ms" do
    setup do
      Application.put_env(:ex_bashkit, :max_timeout_ms, 1_000)
      :ok
    end

    test "a session asking for a longer script or back-call timeout raises at new/1" do
      assert_raise ArgumentError, ~r/limit :timeout_ms is 2000, above the node's ceiling/, fn ->
        Session.new(limits: [timeout_ms: 2_000])
      end

      assert_raise ArgumentError, ~r/:builtin_timeout_ms is 1001, above .*:max_timeout_ms/, fn ->
        Session.new(builtin_timeout_ms: 1_001)
      end

      assert %Session{} = Session.new(limits: [timeout_ms: 1_000], builtin_timeout_ms: 1_000)
    end

    test "a session that asks for nothing runs within the ceiling" do
      parent = self()

      s =
        Session.new(
          builtins: %{
            "hang" => fn _ ->
              send(parent, {:handler, self()})
              Process.sleep(:infinity)
            end
          }
        )

      # The script's default timeout is lowered to the ceiling.
      assert {:error, %{message: message}} = Session.run(s, "sleep 30")
      assert message =~ "timed out after 1000 ms"

      # So is the back-call timeout (the script's own deadline may win the
      # race: either way the builtin does not run past the ceiling).
      case Session.run(s, "hang") do
        {:ok, %Result{exit_code: 124, stderr: stderr}} -> assert stderr =~ "1000 ms"
        {:error, error} -> assert {error.reason, error.limit} == {:timeout, :timeout_ms}
      end

      assert_received {:handler, handler}
      refute Process.alive?(handler)
    end
  end

  describe "max_reply_bytes" do
    setup do
      Application.put_env(:ex_bashkit, :max_reply_bytes, 100)
      :ok
    end

    test "a session asking for more raises; the default is lowered to the ceiling" do
      assert_raise ArgumentError,
                   ~r/:max_reply_bytes is 101, above .*:max_reply_bytes \(100\)/,
                   fn ->
                     Session.new(max_reply_bytes: 101)
                   end

      s =
        Session.new(
          builtins: %{
            "out" => fn %{args: [n]} -> {:ok, :binary.copy("x", String.to_integer(n))} end
          }
        )

      assert {:ok, %Result{exit_code: 0}} = Session.exec(s, "out 100")
      assert {:ok, %Result{exit_code: 1, stderr: stderr}} = Session.exec(s, "out 101")
      assert stderr =~ ":max_reply_bytes (100)"
    end
  end

  describe "a malformed ceiling is reported loudly" do
    test "every new/1 raises, naming the setting" do
      for {key, bad} <- [
            max_timeout_ms: "soon",
            max_timeout_ms: 0,
            max_reply_bytes: -5,
            max_reply_bytes: :infinity
          ] do
        Application.put_env(:ex_bashkit, key, bad)

        assert_raise ArgumentError,
                     ~r/config :ex_bashkit, #{inspect(key)} must be a positive integer/,
                     fn ->
                       Session.new()
                     end

        Application.delete_env(:ex_bashkit, key)
      end

      assert %Session{} = Session.new()
    end
  end
end
