defmodule ExBashkit.MCP.JSONTest do
  use ExUnit.Case, async: true

  alias ExBashkit.MCP.JSON

  doctest ExBashkit.MCP.JSON

  test "round-trips what JSON-RPC carries" do
    value = %{
      "id" => 9_007_199_254_740_993,
      "neg" => -5,
      "big" => 18_446_744_073_709_551_615,
      "f" => 1.5,
      "s" => "tab\t\"quoted\" é \u2028 😀",
      "list" => [true, false, nil, [], %{}],
      "nested" => %{"a" => %{"b" => ["c"]}}
    }

    assert {:ok, json} = JSON.encode(value)
    assert JSON.decode(json) == {:ok, value}
  end

  test "malformed documents say where" do
    for bad <- ["", "{", "[1,]", ~s({"a" 1}), "nul", ~s("\\x"), "1 2", <<0xFF>>] do
      assert {:error, "invalid JSON: " <> message} = JSON.decode(bad), inspect(bad)
      assert message =~ "line", inspect(bad)
    end
  end

  test "deep nesting is an error, not a crash" do
    deep = String.duplicate("[", 100_000) <> String.duplicate("]", 100_000)
    assert {:error, message} = JSON.decode(deep)
    assert message =~ "recursion limit"

    term = Enum.reduce(1..1_000, "x", fn _, acc -> [acc] end)
    assert {:error, message} = JSON.encode(term)
    assert message =~ "deeper than 128"
  end

  test "terms JSON cannot carry are errors" do
    for term <- [
          {:a, 1},
          self(),
          make_ref(),
          <<0xFF, 0xFE>>,
          %{{1} => 2},
          Integer.pow(2, 70),
          [1 | 2],
          URI.parse("http://x")
        ] do
      assert {:error, "cannot encode as JSON: " <> _} = JSON.encode(term), inspect(term)
    end

    assert_raise ArgumentError, fn -> JSON.encode!({:tuple}) end
  end

  test "atoms are strings; duplicate keys keep the last" do
    assert JSON.encode(%{ok: :yes}) == {:ok, ~s({"ok":"yes"})}
    assert JSON.decode(~s({"a":1,"a":2})) == {:ok, %{"a" => 2}}
  end
end
