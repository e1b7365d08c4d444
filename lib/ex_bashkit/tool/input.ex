defmodule ExBashkit.Tool.Input do
  @moduledoc false
  # Reading a tool call's arguments (string or atom keys): a malformed one
  # throws `{:invalid, message}`, which the tool's `call/3` answers as
  # `%{"error" => "invalid input: " <> message}`.

  @doc false
  @spec string!(map(), String.t()) :: String.t()
  def string!(input, name) do
    case optional_string!(input, name) do
      nil -> throw({:invalid, "#{inspect(name)} is required"})
      value -> value
    end
  end

  @doc false
  @spec optional_string!(map(), String.t()) :: String.t() | nil
  def optional_string!(input, name) do
    case field(input, name) do
      nil ->
        nil

      value when is_binary(value) ->
        if String.valid?(value),
          do: value,
          else: throw({:invalid, "#{inspect(name)} is not valid UTF-8"})

      other ->
        throw({:invalid, "#{inspect(name)} must be a string, got: #{inspect(other)}"})
    end
  end

  # An atom key is matched by its text: no atom is made from the input.
  defp field(input, name) do
    case Map.fetch(input, name) do
      {:ok, value} ->
        value

      :error ->
        Enum.find_value(input, fn {key, value} ->
          if is_atom(key) and Atom.to_string(key) == name, do: value
        end)
    end
  end

  @doc false
  @spec optional_pos_integer!(map(), String.t()) :: pos_integer() | nil
  def optional_pos_integer!(input, name) do
    case field(input, name) do
      nil ->
        nil

      value when is_integer(value) and value >= 1 ->
        value

      other ->
        throw({:invalid, "#{inspect(name)} must be a positive integer, got: #{inspect(other)}"})
    end
  end
end
