"""BLIP family: Salesforce BLIP image captioning (facts only; the implementation is Vision2Seq/ over Seq2Seq/)."""
